//! Property tests of the scheduling core: random DAGs with random
//! attempt outcomes and decisions, driven at different concurrency and in
//! different completion orders. Every run terminates within
//! (1 + R) × Σ max_attempts executions, never starts a node before its
//! parents admit it, and (when nothing halts it) ends in the same states
//! whatever the concurrency.

use bl_run::{
    AttemptEnd, EdgeSpec, FailMode, Guard, Join, Machine, NodeSpec, NodeState, RunStatus, Spec,
    Transition,
};
use proptest::prelude::*;

/// A random graph, and the outcome of every (node, round, attempt).
#[derive(Debug, Clone)]
struct Case {
    spec: Spec,
    /// outcome[node][k]: how attempt k of a round ends (k counts from the
    /// round's first attempt and shifts by the round, cycled), so an
    /// outcome depends on (node, round, attempt) and never on timing.
    outcomes: Vec<Vec<AttemptEnd>>,
    /// Per approval node: the decision.
    decisions: Vec<bool>,
    /// Record the decision before the node asks for it.
    early: Vec<bool>,
}

fn guard() -> impl Strategy<Value = Guard> {
    prop_oneof![
        6 => Just(Guard::Default),
        1 => Just(Guard::Succeeded),
        1 => Just(Guard::Failed),
        1 => Just(Guard::Skipped),
        1 => Just(Guard::Terminal),
    ]
}

fn end() -> impl Strategy<Value = AttemptEnd> {
    prop_oneof![
        6 => Just(AttemptEnd::Succeeded),
        3 => Just(AttemptEnd::Rejected),
        1 => Just(AttemptEnd::Stopped),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..10, any::<bool>(), 0u32..3).prop_flat_map(|(n, continue_declared, budget)| {
        let fail_mode = if continue_declared {
            FailMode::ContinueDeclared
        } else {
            FailMode::FailClosed
        };
        // Repair needs continue_declared and a budget, as validation says.
        let budget = if continue_declared { budget } else { 0 };
        let pairs: Vec<(usize, usize)> = (0..n).flat_map(|j| (0..j).map(move |i| (i, j))).collect();
        let edges = prop::collection::vec((any::<bool>(), guard()), pairs.len());
        let nodes = prop::collection::vec(
            (
                1u32..4,
                prop_oneof![
                    3 => Just(None),
                    1 => Just(Some(Join::AllSelected)),
                    1 => Just(Some(Join::AllSuccessful)),
                    1 => Just(Some(Join::AnySuccessful)),
                ],
                prop::bool::weighted(0.15),
                any::<prop::sample::Index>(),
                prop::bool::weighted(0.3),
            ),
            n,
        );
        let outcomes = prop::collection::vec(prop::collection::vec(end(), 1..6), n);
        let decisions = prop::collection::vec(any::<bool>(), n);
        let early = prop::collection::vec(any::<bool>(), n);
        (
            Just((n, fail_mode, budget, pairs)),
            edges,
            nodes,
            outcomes,
            decisions,
            early,
        )
            .prop_map(
                |((n, fail_mode, budget, pairs), edges, nodes, outcomes, decisions, early)| {
                    let mut edge_specs = Vec::new();
                    for (&(from, to), (keep, guard)) in pairs.iter().zip(edges) {
                        // Only failure-aware guards under continue_declared,
                        // as validation requires.
                        let guard = match (fail_mode, guard) {
                            (
                                FailMode::FailClosed,
                                Guard::Failed | Guard::Skipped | Guard::Terminal,
                            ) => Guard::Default,
                            (_, g) => g,
                        };
                        if keep {
                            edge_specs.push(EdgeSpec {
                                from,
                                to,
                                guard,
                                routes: Vec::new(),
                            });
                        }
                    }
                    let node_specs = nodes
                        .into_iter()
                        .enumerate()
                        .map(|(i, (max_attempts, join, approval, target, repairs))| {
                            let ancestors = ancestors(&edge_specs, i);
                            let repair_target = (repairs && budget > 0 && !ancestors.is_empty())
                                .then(|| ancestors[target.index(ancestors.len())]);
                            NodeSpec {
                                id: format!("n{i}"),
                                max_attempts,
                                join,
                                approval,
                                repair_target,
                            }
                        })
                        .collect();
                    Case {
                        spec: Spec {
                            nodes: node_specs,
                            edges: edge_specs,
                            fail_mode,
                            repair_budget: budget,
                        },
                        outcomes: outcomes.into_iter().take(n).collect(),
                        decisions,
                        early,
                    }
                },
            )
    })
}

fn ancestors(edges: &[EdgeSpec], node: usize) -> Vec<usize> {
    let mut found = std::collections::BTreeSet::new();
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        for e in edges.iter().filter(|e| e.to == n) {
            if found.insert(e.from) {
                stack.push(e.from);
            }
        }
    }
    found.into_iter().collect()
}

/// What a driven run left.
struct Driven {
    status: RunStatus,
    states: Vec<NodeState>,
    executions: u64,
    halted: bool,
}

/// Drives `case` with at most `concurrency` attempts at a time, finishing
/// the running attempt that `order` picks each step.
fn drive(case: &Case, concurrency: usize, order: &[prop::sample::Index]) -> Driven {
    let mut machine = Machine::new(case.spec.clone());
    let mut halted = false;
    let mut note = |machine: &Machine, ts: &[Transition]| {
        halted |= ts.iter().any(|t| matches!(t, Transition::Halted { .. }));
        // A skip is judged against the states its transitions left; a
        // repair later in the same list resets them, so only up to it.
        for t in ts {
            match t {
                Transition::RepairRound { .. } => break,
                Transition::Skipped { node, round } if *round == machine.round() => {
                    assert_skipped(machine, *node)
                }
                _ => {}
            }
        }
    };
    for (node, spec) in case.spec.nodes.iter().enumerate() {
        if spec.approval && case.early[node] {
            let ts = machine.decide(node, case.decisions[node]).unwrap();
            note(&machine, &ts);
        }
    }
    let ts = machine.begin();
    note(&machine, &ts);
    let mut running: Vec<(usize, u32, u32)> = Vec::new();
    let bound = case.spec.execution_bound();
    for step in 0.. {
        assert!(step < 10_000, "the run does not terminate");
        while running.len() < concurrency {
            let Some(&node) = machine.ready().first() else {
                break;
            };
            assert_admitted(&machine, node);
            let ts = machine.start(node).unwrap();
            note(&machine, &ts);
            if let Some(&Transition::Started { round, attempt, .. }) = ts.first() {
                running.push((node, round, attempt));
            }
        }
        if running.is_empty() {
            // Nothing runs: answer the approvals waiting, or stop.
            let waiting: Vec<usize> = (0..case.spec.nodes.len())
                .filter(|&n| machine.state(n) == NodeState::AwaitingApproval)
                .collect();
            if waiting.is_empty() || machine.status() != RunStatus::Paused {
                break;
            }
            for node in waiting {
                let ts = machine.decide(node, case.decisions[node]).unwrap();
                note(&machine, &ts);
            }
            continue;
        }
        let pick = order[step % order.len()].index(running.len());
        let (node, round, attempt) = running.remove(pick);
        let k = (round * 3 + attempt - 1) as usize;
        let end = case.outcomes[node][k % case.outcomes[node].len()];
        let ts = machine.finish(node, round, end).unwrap();
        note(&machine, &ts);
        assert!(machine.executions() <= bound, "past the execution bound");
    }
    assert_stuck_for_good(&machine);
    Driven {
        status: machine.status(),
        states: machine.states().to_vec(),
        executions: machine.executions(),
        halted,
    }
}

/// Whether an edge's guard is met by its source's final state (the seed's
/// rule, restated here as the oracle the machine is checked against).
fn guard_met(guard: Guard, source: NodeState) -> bool {
    match guard {
        Guard::Terminal => source.is_terminal(),
        Guard::Default | Guard::Succeeded => source == NodeState::Succeeded,
        Guard::Failed => matches!(source, NodeState::Failed(_)),
        Guard::Skipped => source == NodeState::Skipped,
    }
}

/// The oracle, once every parent has ended: `Some(true)` starts the node,
/// `Some(false)` skips it, `None` leaves it waiting for good. Restated from
/// tests/corpus/graph-runs/SEMANTICS.md, where bounded-loops 0.7.6's 90
/// guard × mode × parent-outcome runs are recorded.
///
/// - A plain node: an unconditional edge needs its source SUCCEEDED (a
///   FAILED one blocks, a SKIPPED one cascades the skip); a guard that
///   missed excludes its edge (from a SKIPPED source, the skip cascades);
///   it starts when no edge blocks or cascades and one is selected.
/// - A join: its edges select parents (an unconditional edge always, a
///   guard when met); none selected skips it; otherwise the mode decides
///   over the selected parents, and a guard never overrides it. The mode
///   unmet, it waits behind an unconditional edge from a FAILED parent and
///   is skipped otherwise.
fn oracle(join: Option<Join>, incoming: &[(Guard, NodeState)]) -> Option<bool> {
    let blocked =
        |(g, s): &(Guard, NodeState)| *g == Guard::Default && matches!(s, NodeState::Failed(_));
    match join {
        None => {
            let cascades = |(g, s): &(Guard, NodeState)| {
                *s == NodeState::Skipped && (*g == Guard::Default || !guard_met(*g, *s))
            };
            if incoming.iter().any(blocked) {
                None
            } else if incoming.iter().any(cascades) {
                Some(false)
            } else {
                Some(incoming.iter().any(|(g, s)| guard_met(*g, *s)))
            }
        }
        Some(mode) => {
            let selected: Vec<NodeState> = incoming
                .iter()
                .filter(|(g, s)| *g == Guard::Default || guard_met(*g, *s))
                .map(|(_, s)| *s)
                .collect();
            if selected.is_empty() {
                return Some(false);
            }
            let met = match mode {
                Join::AllSelected => true,
                Join::AllSuccessful => selected.iter().all(|s| *s == NodeState::Succeeded),
                Join::AnySuccessful => selected.contains(&NodeState::Succeeded),
            };
            if met {
                Some(true)
            } else if incoming.iter().any(blocked) {
                None
            } else {
                Some(false)
            }
        }
    }
}

fn incoming(machine: &Machine, node: usize) -> Vec<(Guard, NodeState)> {
    machine
        .spec()
        .edges
        .iter()
        .filter(|e| e.to == node)
        .map(|e| (e.guard, machine.state(e.from)))
        .collect()
}

/// A node starts only once every parent has ended and the oracle admits
/// it (bounded-loops' causality rule), with the seed's one exception: an
/// any_successful join over unconditional edges starts as soon as one
/// parent succeeded.
fn assert_admitted(machine: &Machine, node: usize) {
    let spec = machine.spec();
    let id = &spec.nodes[node].id;
    let incoming = incoming(machine, node);
    if incoming.is_empty() {
        return;
    }
    let join = spec.nodes[node].join;
    let early = join == Some(Join::AnySuccessful)
        && incoming.iter().all(|(g, _)| *g == Guard::Default)
        && incoming.iter().any(|(_, s)| *s == NodeState::Succeeded);
    if early {
        return;
    }
    assert!(
        incoming.iter().all(|(_, s)| s.is_terminal()),
        "{id} started before its parents ended: {incoming:?}"
    );
    assert_eq!(
        oracle(join, &incoming),
        Some(true),
        "{id} ({join:?}) started against the rule: {incoming:?}"
    );
}

/// A node is skipped only once every parent has ended, and only where the
/// oracle skips it.
fn assert_skipped(machine: &Machine, node: usize) {
    let spec = machine.spec();
    let id = &spec.nodes[node].id;
    let incoming = incoming(machine, node);
    assert!(
        incoming.iter().all(|(_, s)| s.is_terminal()),
        "{id} was skipped before its parents ended: {incoming:?}"
    );
    assert_eq!(
        oracle(spec.nodes[node].join, &incoming),
        Some(false),
        "{id} was skipped against the rule: {incoming:?}"
    );
}

/// Every node left PENDING at the end waits for good: the oracle says so.
fn assert_stuck_for_good(machine: &Machine) {
    if machine.status() != RunStatus::Failed {
        return;
    }
    for (node, state) in machine.states().iter().enumerate() {
        let incoming = incoming(machine, node);
        if *state == NodeState::Pending && incoming.iter().all(|(_, s)| s.is_terminal()) {
            // A halt, or an approval still waiting, holds back what lies
            // after it, as bounded-loops' walk of the waves stops there.
            let halted = machine.states().iter().any(|s| {
                matches!(
                    s,
                    NodeState::Failed(bl_run::Failure::Stop) | NodeState::AwaitingApproval
                )
            });
            if !halted && machine.spec().fail_mode == FailMode::ContinueDeclared {
                assert_eq!(
                    oracle(machine.spec().nodes[node].join, &incoming),
                    None,
                    "{} was left PENDING against the rule: {incoming:?}",
                    machine.spec().nodes[node].id
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn runs_terminate_within_the_bound_and_never_start_a_node_early(
        case in case(),
        order in prop::collection::vec(any::<prop::sample::Index>(), 1..16),
    ) {
        for concurrency in [1, 3, 8] {
            let run = drive(&case, concurrency, &order);
            prop_assert_ne!(run.status, RunStatus::Running);
            prop_assert!(run.executions <= case.spec.execution_bound());
            if run.status == RunStatus::Succeeded {
                prop_assert!(run.states.iter().all(|s| matches!(s, NodeState::Succeeded | NodeState::Skipped)));
            }
        }
    }

    #[test]
    fn the_final_states_do_not_depend_on_concurrency_or_order(
        case in case(),
        order in prop::collection::vec(any::<prop::sample::Index>(), 1..16),
    ) {
        let one = drive(&case, 1, &order);
        let eight = drive(&case, 8, &order);
        // A halt stops the run wherever it stands, and how far the other
        // branches got depends on how many ran at once: compared by status.
        // Which failure starts a repair round first, when branches fail in
        // parallel, depends on timing too: runs with repairs are compared
        // by the properties of the other test only.
        let repairs = case.spec.nodes.iter().any(|n| n.repair_target.is_some());
        if !repairs {
            prop_assert_eq!(one.status, eight.status);
            prop_assert_eq!(one.halted, eight.halted);
            if !one.halted {
                prop_assert_eq!(&one.states, &eight.states);
            } else {
                // Halted: how far the run got may differ, and a halt may cut
                // a node's retries short (it fails where the other run's
                // retry succeeded). Otherwise a node that ended in both runs
                // ended the same way.
                for (a, b) in one.states.iter().zip(&eight.states) {
                    let cut_short =
                        matches!(a, NodeState::Failed(_)) || matches!(b, NodeState::Failed(_));
                    if a.is_terminal() && b.is_terminal() && !cut_short {
                        prop_assert_eq!(a, b);
                    }
                }
            }
        }
    }
}

/// A plain node with one attempt.
fn worker(id: &str) -> NodeSpec {
    NodeSpec {
        id: id.into(),
        max_attempts: 1,
        join: None,
        approval: false,
        repair_target: None,
    }
}

#[test]
fn a_failed_unconditional_dependency_blocks_and_a_failed_guard_routes_around_it() {
    let spec = Spec {
        nodes: vec![worker("a"), worker("b"), worker("recover")],
        edges: vec![
            EdgeSpec {
                from: 0,
                to: 1,
                guard: Guard::Default,
                routes: Vec::new(),
            },
            EdgeSpec {
                from: 0,
                to: 2,
                guard: Guard::Failed,
                routes: Vec::new(),
            },
        ],
        fail_mode: FailMode::ContinueDeclared,
        repair_budget: 0,
    };
    let mut m = Machine::new(spec);
    m.begin();
    m.start(0).unwrap();
    m.finish(0, 0, AttemptEnd::Rejected).unwrap();
    // It waits for good, as bounded-loops leaves it PENDING
    // (tests/corpus/graph-runs/cd_unconditional_failed_parent).
    assert_eq!(m.state(1), NodeState::Pending);
    assert_eq!(m.ready(), vec![2]);
    m.start(2).unwrap();
    m.finish(2, 0, AttemptEnd::Succeeded).unwrap();
    // A handled failure still fails the run.
    assert_eq!(m.status(), RunStatus::Failed);
}

#[test]
fn a_repair_round_resets_the_target_and_everything_after_it_within_the_budget() {
    let spec = Spec {
        nodes: vec![
            worker("fetch"),
            NodeSpec {
                repair_target: Some(0),
                ..worker("verify")
            },
        ],
        edges: vec![EdgeSpec {
            from: 0,
            to: 1,
            guard: Guard::Default,
            routes: Vec::new(),
        }],
        fail_mode: FailMode::ContinueDeclared,
        repair_budget: 1,
    };
    let mut m = Machine::new(spec);
    m.begin();
    m.start(0).unwrap();
    m.finish(0, 0, AttemptEnd::Succeeded).unwrap();
    m.start(1).unwrap();
    let ts = m.finish(1, 0, AttemptEnd::Rejected).unwrap();
    assert!(ts.contains(&Transition::RepairRound {
        round: 1,
        trigger: 1,
        target: 0
    }));
    assert!(ts.contains(&Transition::Repaired {
        node: 0,
        round: 1,
        left: NodeState::Succeeded
    }));
    assert_eq!(m.round(), 1);
    assert_eq!(m.ready(), vec![0]);
    m.start(0).unwrap();
    m.finish(0, 1, AttemptEnd::Succeeded).unwrap();
    m.start(1).unwrap();
    // The budget is spent: this failure ends the run.
    let ts = m.finish(1, 1, AttemptEnd::Rejected).unwrap();
    assert!(
        !ts.iter()
            .any(|t| matches!(t, Transition::RepairRound { .. }))
    );
    assert_eq!(m.status(), RunStatus::Failed);
    assert_eq!(m.executions(), 4);
}

#[test]
fn an_approval_pauses_the_run_and_an_early_decision_is_honoured() {
    let node = |id: &str, approval| NodeSpec {
        approval,
        ..worker(id)
    };
    let spec = Spec {
        nodes: vec![
            node("draft", false),
            node("sign-off", true),
            node("publish", false),
        ],
        edges: vec![
            EdgeSpec {
                from: 0,
                to: 1,
                guard: Guard::Default,
                routes: Vec::new(),
            },
            EdgeSpec {
                from: 1,
                to: 2,
                guard: Guard::Default,
                routes: Vec::new(),
            },
        ],
        fail_mode: FailMode::FailClosed,
        repair_budget: 0,
    };
    let mut m = Machine::new(spec.clone());
    m.begin();
    m.start(0).unwrap();
    m.finish(0, 0, AttemptEnd::Succeeded).unwrap();
    assert_eq!(m.ready(), vec![1]);
    m.start(1).unwrap();
    assert_eq!(m.status(), RunStatus::Paused);
    m.decide(1, true).unwrap();
    assert_eq!(m.ready(), vec![2]);

    let mut early = Machine::new(spec);
    early.decide(1, false).unwrap();
    early.begin();
    early.start(0).unwrap();
    early.finish(0, 0, AttemptEnd::Succeeded).unwrap();
    let ts = early.start(1).unwrap();
    assert!(ts.contains(&Transition::Rejected { node: 1, round: 0 }));
    assert_eq!(early.status(), RunStatus::Failed);
}

/// Runs a small graph to its end at concurrency 1, every worker attempt
/// ending as `ends` says, and returns the final states by node id.
fn run_to_end(
    nodes: &[(&str, Option<Join>)],
    edges: &[(&str, &str, Guard)],
    ends: &[(&str, AttemptEnd)],
) -> std::collections::BTreeMap<String, NodeState> {
    let index = |id: &str| nodes.iter().position(|(n, _)| *n == id).unwrap();
    let spec = Spec {
        nodes: nodes
            .iter()
            .map(|(id, join)| NodeSpec {
                join: *join,
                ..worker(id)
            })
            .collect(),
        edges: edges
            .iter()
            .map(|(from, to, guard)| EdgeSpec {
                from: index(from),
                to: index(to),
                guard: *guard,
                routes: Vec::new(),
            })
            .collect(),
        fail_mode: FailMode::ContinueDeclared,
        repair_budget: 0,
    };
    let mut m = Machine::new(spec);
    m.begin();
    while let Some(&node) = m.ready().first() {
        let id = nodes[node].0;
        let end = ends
            .iter()
            .find(|(n, _)| *n == id)
            .map_or(AttemptEnd::Succeeded, |(_, e)| *e);
        m.start(node).unwrap();
        m.finish(node, m.round(), end).unwrap();
    }
    nodes
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.to_string(), m.state(i)))
        .collect()
}

/// The join table bounded-loops 0.7.6 was recorded to follow
/// (tests/corpus/graph-runs/SEMANTICS.md, "Joins").
#[test]
fn joins_decide_as_bounded_loops_does() {
    use AttemptEnd::{Rejected, Succeeded};
    use Guard::{Default, Failed};
    let failed = NodeState::Failed(bl_run::Failure::Outcome);
    // ok + FAILED (unconditional).
    for (mode, expected) in [
        (Join::AllSelected, NodeState::Succeeded),
        (Join::AllSuccessful, NodeState::Pending),
        (Join::AnySuccessful, NodeState::Succeeded),
    ] {
        let states = run_to_end(
            &[("a", None), ("b", None), ("j", Some(mode))],
            &[("a", "j", Default), ("b", "j", Default)],
            &[("b", Rejected)],
        );
        assert_eq!(states["b"], failed);
        assert_eq!(states["j"], expected, "{mode:?}");
    }
    // FAILED + FAILED: any_successful waits for good.
    let states = run_to_end(
        &[("a", None), ("b", None), ("j", Some(Join::AnySuccessful))],
        &[("a", "j", Default), ("b", "j", Default)],
        &[("a", Rejected), ("b", Rejected)],
    );
    assert_eq!(states["j"], NodeState::Pending);
    // ok + FAILED behind `when: succeeded` (excluded): all_successful runs.
    let states = run_to_end(
        &[("a", None), ("b", None), ("j", Some(Join::AllSuccessful))],
        &[("a", "j", Default), ("b", "j", Guard::Succeeded)],
        &[("b", Rejected)],
    );
    assert_eq!(states["j"], NodeState::Succeeded);
    // Every edge excluded: skipped, and the skip cascades.
    let states = run_to_end(
        &[
            ("a", None),
            ("b", None),
            ("j", Some(Join::AllSelected)),
            ("after", None),
        ],
        &[
            ("a", "j", Failed),
            ("b", "j", Failed),
            ("j", "after", Default),
        ],
        &[],
    );
    assert_eq!(states["j"], NodeState::Skipped);
    assert_eq!(states["after"], NodeState::Skipped);
    // A SKIPPED parent (unconditional) and an ok one.
    for (mode, expected) in [
        (Join::AllSuccessful, NodeState::Skipped),
        (Join::AnySuccessful, NodeState::Succeeded),
    ] {
        let states = run_to_end(
            &[("r", None), ("s", None), ("ok", None), ("j", Some(mode))],
            &[
                ("r", "s", Failed),
                ("s", "j", Default),
                ("ok", "j", Default),
            ],
            &[("r", Succeeded)],
        );
        assert_eq!(states["s"], NodeState::Skipped);
        assert_eq!(states["j"], expected, "{mode:?}");
    }
}

/// The two defects found with hostile timing: an any_successful join over
/// guarded edges must wait for every parent, and a guard never overrides
/// the join's mode (tests/corpus/graph-runs/jm_terminal_*).
#[test]
fn a_join_waits_for_every_parent_and_its_mode_decides_over_the_guards() {
    use Guard::{Default, Terminal};
    let spec = |mode| Spec {
        nodes: vec![
            worker("p1"),
            worker("p2"),
            NodeSpec {
                join: Some(mode),
                ..worker("j")
            },
            worker("after"),
        ],
        edges: vec![
            EdgeSpec {
                from: 0,
                to: 2,
                guard: Terminal,
                routes: Vec::new(),
            },
            EdgeSpec {
                from: 1,
                to: 2,
                guard: Terminal,
                routes: Vec::new(),
            },
            EdgeSpec {
                from: 2,
                to: 3,
                guard: Default,
                routes: Vec::new(),
            },
        ],
        fail_mode: FailMode::ContinueDeclared,
        repair_budget: 0,
    };
    // any_successful: p2 succeeds while p1 still runs; j must not start.
    let mut m = Machine::new(spec(Join::AnySuccessful));
    m.begin();
    m.start(0).unwrap();
    m.start(1).unwrap();
    m.finish(1, 0, AttemptEnd::Succeeded).unwrap();
    assert!(m.ready().is_empty(), "j started before p1 ended");
    m.finish(0, 0, AttemptEnd::Rejected).unwrap();
    assert_eq!(m.ready(), vec![2]);
    // all_successful: p1 failed, p2 succeeded, both `when: terminal`.
    let mut m = Machine::new(spec(Join::AllSuccessful));
    m.begin();
    for (node, end) in [(0, AttemptEnd::Rejected), (1, AttemptEnd::Succeeded)] {
        m.start(node).unwrap();
        m.finish(node, 0, end).unwrap();
    }
    assert_eq!(m.state(2), NodeState::Skipped);
    assert_eq!(m.state(3), NodeState::Skipped);
    assert_eq!(m.status(), RunStatus::Failed);
}

#[test]
fn a_router_takes_one_route_and_skips_what_lies_beyond_the_others() {
    // router -> fix (route 0) -> after-fix; router -> ship (route 1); router -> log (always).
    let edge = |from, to, routes: Vec<u32>| EdgeSpec {
        from,
        to,
        guard: Guard::Default,
        routes,
    };
    let spec = Spec {
        nodes: vec![
            worker("router"),
            worker("fix"),
            worker("ship"),
            worker("log"),
            worker("after-fix"),
        ],
        edges: vec![
            edge(0, 1, vec![0]),
            edge(0, 2, vec![1]),
            edge(0, 3, vec![]),
            edge(1, 4, vec![]),
        ],
        fail_mode: FailMode::FailClosed,
        repair_budget: 0,
    };
    let mut m = Machine::new(spec);
    m.begin();
    m.start(0).unwrap();
    let ts = m
        .finish_routed(0, 0, AttemptEnd::Succeeded, Some(1))
        .unwrap();
    assert!(ts.contains(&Transition::Skipped { node: 1, round: 0 }));
    assert_eq!(m.ready(), vec![2, 3]);
    // What lies beyond the skipped route is skipped once the router's wave
    // has run, as bounded-loops walks the waves.
    m.start(2).unwrap();
    m.finish(2, 0, AttemptEnd::Succeeded).unwrap();
    m.start(3).unwrap();
    let ts = m.finish(3, 0, AttemptEnd::Succeeded).unwrap();
    assert!(ts.contains(&Transition::Skipped { node: 4, round: 0 }));
    assert_eq!(m.status(), RunStatus::Succeeded);
}
