CD = "continue_declared"
RUN = "bl graph run --execute manifest.json --connections connections.json --inputs inputs.json --out run-dir"
ST = "bl graph status --run run-dir --json"
EXT = lambda m, c: [x.update({"allowed_effects": ["read_only", "workspace_write", "external_write"]}) for x in c]

def J(name, mode, a, b, wa=None, wb=None, desc=""):
    return dict(name=name, fail_mode=CD, description=desc,
                nodes=[{"id": "a"}, {"id": "b"}, {"id": "j", "kind": "join", "mode": mode}, {"id": "after"}],
                edges=[("a", "j", wa), ("b", "j", wb), ("j", "after")], inputs={"a": a, "b": b, "after": "ok"})

def JS(name, mode, desc=""):
    # parent 'a' is SKIPPED (its only edge is a failed `when: succeeded` guard), parent 'b' succeeds
    return dict(name=name, fail_mode=CD, description=desc,
                nodes=[{"id": "x"}, {"id": "a"}, {"id": "b"}, {"id": "j", "kind": "join", "mode": mode}, {"id": "after"}],
                edges=[("x", "a", "succeeded"), ("a", "j"), ("b", "j"), ("j", "after")],
                inputs={"x": "fail", "a": "ok", "b": "ok", "after": "ok"})

CASES = [
 dict(name="chain_succeeds", description="Linear chain a->b->c, every agent replies: run SUCCEEDED, exit 0.",
      nodes=[{"id": "a"}, {"id": "b"}, {"id": "c"}], edges=[("a", "b"), ("b", "c")], inputs={"a": "ok", "b": "ok", "c": "ok"},
      commands=[RUN, ST, "bl graph status --run run-dir", "bl graph resume --run run-dir --inputs inputs.json"]),
 dict(name="fail_closed_stops", description="fail_closed: a's CLI exits 1 (worker_fault); run stops, children b and c stay PENDING.",
      nodes=[{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "z"}], edges=[("a", "b"), ("a", "c")], inputs={"a": "fail", "b": "ok", "c": "ok", "z": "ok"}),
 dict(name="gate_rejects_empty_reply", description="An empty reply is rejected by the structural gate (gate_rejected).",
      nodes=[{"id": "a"}], edges=[], inputs={"a": "empty"}),
 dict(name="cd_when_failed_recovery", fail_mode=CD, description="continue_declared: a fails; recovery edge `when: failed` runs; unconditional child 'next' stays PENDING; run FAILED.",
      nodes=[{"id": "a"}, {"id": "recover"}, {"id": "next"}], edges=[("a", "recover", "failed"), ("a", "next")], inputs={"a": "fail", "recover": "ok", "next": "ok"}),
 dict(name="cd_when_failed_not_taken", fail_mode=CD, description="continue_declared: a succeeds; `when: failed` child is SKIPPED; run SUCCEEDED.",
      nodes=[{"id": "a"}, {"id": "recover"}, {"id": "next"}], edges=[("a", "recover", "failed"), ("a", "next")], inputs={"a": "ok", "recover": "ok", "next": "ok"}),
 dict(name="cd_when_skipped", fail_mode=CD, description="a fails; b (when: succeeded) SKIPPED; c (when: skipped from b) runs; d (unconditional from b) SKIPPED by cascade.",
      nodes=[{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "d"}], edges=[("a", "b", "succeeded"), ("b", "c", "skipped"), ("b", "d")], inputs={"a": "fail", "b": "ok", "c": "ok", "d": "ok"}),
 dict(name="cd_when_terminal", fail_mode=CD, description="`when: terminal` fires after a FAILED source (cleanup) and after a SUCCEEDED source (cleanup2).",
      nodes=[{"id": "a"}, {"id": "b"}, {"id": "cleanup"}, {"id": "cleanup2"}], edges=[("a", "cleanup", "terminal"), ("b", "cleanup2", "terminal")], inputs={"a": "fail", "b": "ok", "cleanup": "ok", "cleanup2": "ok"}),
 dict(name="cd_unconditional_failed_parent", fail_mode=CD, description="continue_declared: a fails; unconditional chain a->b->c stays PENDING (no event); independent 'other' still runs.",
      nodes=[{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "other"}], edges=[("a", "b"), ("b", "c")], inputs={"a": "fail", "b": "ok", "c": "ok", "other": "ok"}),
 dict(name="cd_skip_cascade_chain", fail_mode=CD, description="Skip cascade along a chain: a fails, b guarded `succeeded` -> SKIPPED, c and d SKIPPED by cascade; e (when: skipped from c) runs.",
      nodes=[{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "d"}, {"id": "e"}], edges=[("a", "b", "succeeded"), ("b", "c"), ("c", "d"), ("c", "e", "skipped")], inputs={"a": "fail", "b": "ok", "c": "ok", "d": "ok", "e": "ok"}),
 dict(name="cd_policy_denied_halts", fail_mode=CD, description="continue_declared does not continue past a policy denial: 'a' has an external_write effect (local_cli denies it); recovery and the independent sibling never run.",
      nodes=[{"id": "a", "effects": ["external_write"]}, {"id": "recover"}, {"id": "sibling"}], edges=[("a", "recover", "failed")], inputs={"a": "ok", "recover": "ok", "sibling": "ok"}, patch=EXT),
 dict(name="cd_missing_prompt", fail_mode=CD, description="continue_declared: node b has no prompt in inputs.json; it fails with worker_fault at run time (not preflight) and the run continues.",
      nodes=[{"id": "a"}, {"id": "b"}, {"id": "recover"}, {"id": "sibling"}], edges=[("a", "b"), ("b", "recover", "failed")], inputs={"a": "ok", "recover": "ok", "sibling": "ok"}),
 J("join_all_selected_mixed", "all_selected", "ok", "fail", desc="all_selected join tolerates a FAILED parent on an unconditional edge: join SUCCEEDED."),
 J("join_all_successful_mixed", "all_successful", "ok", "fail", desc="all_successful join with a FAILED parent on an unconditional edge: join stays PENDING."),
 J("join_any_successful_mixed", "any_successful", "fail", "ok", desc="any_successful join with one FAILED and one SUCCEEDED parent: join SUCCEEDED."),
 J("join_any_successful_all_failed", "any_successful", "fail", "fail", desc="any_successful join with all parents FAILED: join stays PENDING."),
 J("join_all_successful_guarded", "all_successful", "ok", "fail", None, "succeeded", desc="all_successful join whose failed parent's edge is guarded `when: succeeded`: edge excluded, join SUCCEEDED."),
 J("join_any_successful_guarded", "any_successful", "fail", "ok", "succeeded", None, desc="any_successful join, failed parent's edge guarded: join SUCCEEDED."),
 J("join_all_selected_all_excluded", "all_selected", "fail", "fail", "succeeded", "succeeded", desc="Every incoming edge of the join excluded by its guard: join SKIPPED, its child SKIPPED by cascade."),
 JS("join_all_successful_skipped_parent", "all_successful", desc="all_successful join with one SKIPPED parent (unconditional edge) and one SUCCEEDED parent."),
 JS("join_any_successful_skipped_parent", "any_successful", desc="any_successful join with one SKIPPED parent (unconditional edge) and one SUCCEEDED parent."),
 dict(name="retry_flaky_succeeds", description="max_attempts 2: first CLI call exits 1, second replies; node SUCCEEDED at attempt 2.",
      nodes=[{"id": "a", "max_attempts": 2}, {"id": "b"}], edges=[("a", "b")], inputs={"a": "flaky:1", "b": "ok"}),
 dict(name="retry_exhausted", description="max_attempts 2, CLI fails every time: node.failed carries budget_exhausted=true.",
      nodes=[{"id": "a", "max_attempts": 2}, {"id": "b"}], edges=[("a", "b")], inputs={"a": "flaky:5", "b": "ok"}),
 dict(name="retry_gate_rejected", description="max_attempts 3, empty reply every time: three gate rejections then FAILED.",
      nodes=[{"id": "a", "max_attempts": 3}], edges=[], inputs={"a": "empty"}),
 dict(name="repair_succeeds", fail_mode=CD, repair_budget=2, description="verify fails once; repair round 1 re-runs fetch, verify, report; run SUCCEEDED. 'side' is not reachable from fetch and is not reset.",
      nodes=[{"id": "fetch"}, {"id": "side"}, {"id": "verify", "on_failure": {"mode": "repair", "target": "fetch"}}, {"id": "report"}],
      edges=[("fetch", "verify"), ("side", "verify"), ("verify", "report")], inputs={"fetch": "ok", "side": "ok", "verify": "flaky:1", "report": "ok"}),
 dict(name="repair_budget_exhausted", fail_mode=CD, repair_budget=2, description="verify always fails; two repair rounds then the run FAILS.",
      nodes=[{"id": "fetch"}, {"id": "verify", "on_failure": {"mode": "repair", "target": "fetch"}}, {"id": "report"}],
      edges=[("fetch", "verify"), ("verify", "report")], inputs={"fetch": "ok", "verify": "fail", "report": "ok"}),
 dict(name="repair_with_retries", fail_mode=CD, repair_budget=1, description="verify has max_attempts 2 and fails 3 times: attempts exhausted -> repair round 1 -> first attempt of round 1 fails, second succeeds.",
      nodes=[{"id": "fetch"}, {"id": "verify", "max_attempts": 2, "on_failure": {"mode": "repair", "target": "fetch"}}],
      edges=[("fetch", "verify")], inputs={"fetch": "ok", "verify": "flaky:3"}),
 dict(name="approval_approved", description="Approval node pauses the run (exit 3); approve resumes it to SUCCEEDED (exit 0). A second approve of the same node is idempotent.",
      nodes=[{"id": "draft"}, {"id": "gate", "kind": "approval"}, {"id": "ship"}], edges=[("draft", "gate"), ("gate", "ship")], inputs={"draft": "ok", "ship": "ok"},
      commands=[RUN, ST, "bl graph approve --run run-dir --node gate --decision approved --inputs inputs.json", ST,
                "bl graph approve --run run-dir --node gate --decision approved --inputs inputs.json --json"]),
 dict(name="approval_rejected", description="Rejecting the approval fails the node (approval_rejected) and the run (exit 2).",
      nodes=[{"id": "draft"}, {"id": "gate", "kind": "approval"}, {"id": "ship"}], edges=[("draft", "gate"), ("gate", "ship")], inputs={"draft": "ok", "ship": "ok"},
      commands=[RUN, "bl graph approve --run run-dir --node gate --decision rejected --inputs inputs.json --json", ST]),
 dict(name="approval_rejected_continue_declared", fail_mode=CD, description="continue_declared: a rejected approval still stops the run; the `when: failed` branch and the independent sibling do not run.",
      nodes=[{"id": "draft"}, {"id": "gate", "kind": "approval"}, {"id": "ship"}, {"id": "notify"}, {"id": "sibling"}],
      edges=[("draft", "gate"), ("gate", "ship"), ("gate", "notify", "failed")], inputs={"draft": "ok", "ship": "ok", "notify": "ok", "sibling": "ok"},
      commands=[RUN, "bl graph approve --run run-dir --node gate --decision rejected --inputs inputs.json", ST]),
 dict(name="approval_missing_inputs", description="Prompts are not persisted: approving without --inputs while a connector node is still PENDING is refused (exit 2) and records no decision (approvals.json ends with one commit, resource_version 2); approving again with --inputs succeeds.",
      nodes=[{"id": "draft"}, {"id": "gate", "kind": "approval"}, {"id": "ship"}], edges=[("draft", "gate"), ("gate", "ship")], inputs={"draft": "ok", "ship": "ok"},
      commands=[RUN, "bl graph approve --run run-dir --node gate --decision approved", ST, "bl graph approve --run run-dir --node gate --decision approved --inputs inputs.json", ST]),
 dict(name="approval_early_decision", description="Two approval gates; g2 is approved while the run waits on g1 (exit 3, no event); approving g1 then runs through g2 without pausing.",
      nodes=[{"id": "draft"}, {"id": "g1", "kind": "approval"}, {"id": "mid"}, {"id": "g2", "kind": "approval"}, {"id": "final"}],
      edges=[("draft", "g1"), ("g1", "mid"), ("mid", "g2"), ("g2", "final")], inputs={"draft": "ok", "mid": "ok", "final": "ok"},
      commands=[RUN, "bl graph approve --run run-dir --node g2 --decision approved --inputs inputs.json --json", ST,
                "bl graph approve --run run-dir --node g1 --decision approved --inputs inputs.json --json", ST]),
 dict(name="approval_two_gates_sequential", description="Two approval gates decided one after another: exit 3, 3, 0; run.resumed ordinals 1 and 2.",
      nodes=[{"id": "draft"}, {"id": "g1", "kind": "approval"}, {"id": "mid"}, {"id": "g2", "kind": "approval"}, {"id": "final"}],
      edges=[("draft", "g1"), ("g1", "mid"), ("mid", "g2"), ("g2", "final")], inputs={"draft": "ok", "mid": "ok", "final": "ok"},
      commands=[RUN + " --json", "bl graph approve --run run-dir --node g1 --decision approved --inputs inputs.json", ST,
                "bl graph approve --run run-dir --node g2 --decision approved --inputs inputs.json", ST,
                "bl graph approve --run run-dir --node mid --decision approved --inputs inputs.json"]),
 dict(name="publish_fires", description="publish node without a connection slot and with a workspace_write effect: a JSON receipt artifact is stored, published-effects.json is written (outcome 'fired'), run SUCCEEDED.",
      nodes=[{"id": "draft"}, {"id": "pub", "kind": "publish", "publication_policy": "local-ledger", "effects": ["workspace_write"], "slot": None}],
      edges=[("draft", "pub")], inputs={"draft": "ok"}),
 dict(name="publish_with_slot_rejected", description="publish node bound to a local_cli slot: the agent's reply is treated as the publish receipt, which is not JSON -> gate_rejected.",
      nodes=[{"id": "draft"}, {"id": "pub", "kind": "publish", "publication_policy": "local-ledger", "effects": ["read_only"]}],
      edges=[("draft", "pub")], inputs={"draft": "ok", "pub": "ok"}),
 dict(name="publish_external_write_denied", description="publish node with an external_write effect: policy_denied at run time.",
      nodes=[{"id": "draft"}, {"id": "pub", "kind": "publish", "publication_policy": "local-ledger", "effects": ["external_write"], "slot": None}],
      edges=[("draft", "pub")], inputs={"draft": "ok"}),
 dict(name="preflight_unknown_provider", description="provider_id 'openai' has no local_cli profile: refused before any node runs, exit 2, no run directory files.",
      nodes=[{"id": "a"}, {"id": "b", "provider": "openai"}], edges=[("a", "b")], inputs={"a": "ok", "b": "ok"}),
 dict(name="missing_cli_on_path", description="The grok CLI is not on PATH: node b fails with worker_fault at run time (after a succeeded), not at preflight.",
      nodes=[{"id": "a"}, {"id": "b", "provider": "grok"}], edges=[("a", "b")], inputs={"a": "ok", "b": "ok"}, remove_clis=["grok"]),
 dict(name="missing_prompt_fail_closed", description="fail_closed: node b has no prompt; worker_fault at run time.",
      nodes=[{"id": "a"}, {"id": "b"}], edges=[("a", "b")], inputs={"a": "ok"}),
 dict(name="shared_binding_policy_denied", description="Two nodes bound to the SAME connection slot/binding: the first node is policy_denied (every node needs its own binding in 0.7.6).",
      nodes=[{"id": "a", "slot": "shared"}, {"id": "b", "slot": "shared"}], edges=[("a", "b")], inputs={"a": "ok", "b": "ok"}),
 dict(name="claude_bad_envelope", description="claude prints non-JSON: worker_contract failure, no retry.",
      nodes=[{"id": "a", "max_attempts": 2}], edges=[], inputs={"a": "badjson"}),
 dict(name="claude_is_error_envelope", description="claude envelope with is_error=true and result 'boom' is accepted as a reply (SUCCEEDED).",
      nodes=[{"id": "a"}], edges=[], inputs={"a": "iserror"}),
 dict(name="providers_plain_and_envelope", description="codex and muse take plain stdout (prompt as positional arg); claude reads the prompt on stdin and answers with a JSON envelope.",
      nodes=[{"id": "a", "provider": "codex"}, {"id": "b", "provider": "muse"}, {"id": "c", "provider": "claude"}],
      edges=[("a", "b"), ("b", "c")], inputs={"a": "ok", "b": "ok", "c": "ok"}),
 dict(name="provider_grok_agy_envelope_rejected", fail_mode=CD, description="grok and agy are asked for their own JSON envelopes (--output-format json); the fake's claude-shaped envelope is not accepted -> worker_contract. Although fail_mode is continue_declared, a broken worker contract halts the run, so the independent grok node never starts (its CLI argv was recorded in an exploratory run: grok -p <prompt> --output-format json).",
      nodes=[{"id": "a", "provider": "agy"}, {"id": "g", "provider": "grok"}], edges=[], inputs={"a": "ok", "g": "ok"}),
 dict(name="token_budget_pause_resume", description="--max-tokens 15: after a spends 15 tokens the run pauses (run.budget.paused, exit 2, run RUNNING); resume with a higher ceiling finishes it.",
      nodes=[{"id": "a"}, {"id": "b"}], edges=[("a", "b")], inputs={"a": "ok", "b": "ok"},
      commands=[RUN + " --max-tokens 15", ST, "bl graph resume --run run-dir --inputs inputs.json --max-tokens 1000 --json", ST]),
 dict(name="node_token_budget_unmeasurable", description="Node budget declares max_tokens but codex does not report tokens: budget_unmeasurable.",
      nodes=[{"id": "a", "provider": "codex", "budget_extra": {"max_tokens": 1000, "max_cost_microunits": None}}], edges=[], inputs={"a": "ok"}),
 dict(name="resume_after_kill", description="The bl process is SIGKILLed while node 'slow' runs; `bl graph resume` re-drives the incomplete node and finishes the run.",
      nodes=[{"id": "a"}, {"id": "slow"}, {"id": "c"}], edges=[("a", "slow"), ("slow", "c")],
      inputs_files={"inputs.json": {"a": "ok", "slow": "sleep:6", "c": "ok"}, "inputs-resume.json": {"a": "ok", "slow": "ok", "c": "ok"}},
      commands=["timeout -s KILL 3 " + RUN, ST, "sleep 4", "bl graph resume --run run-dir --inputs inputs-resume.json --json", ST]),
 dict(name="failclosed_guard_refused", description="`when: failed` under fail_closed is refused at compile time.",
      nodes=[{"id": "a"}, {"id": "b"}], edges=[("a", "b", "failed")], inputs={"a": "ok", "b": "ok"}),
]

# Join matrix (jm_<guard>_<mode>_<outcome1>_<outcome2>): parents p1, p2 -> join j -> after (unconditional).
# guard: the `when` on BOTH edges into j ("none" = no `when`); outcome: ok (prompt ok), fail (prompt fail),
# skip (a root rN replying ok feeds pN over a `when: failed` edge, so pN's branch is not taken -> SKIPPED).
JM_GUARDS = ["none", "succeeded", "failed", "skipped", "terminal"]
JM_MODES = ["all_selected", "all_successful", "any_successful"]
JM_PAIRS = [("ok", "ok"), ("ok", "fail"), ("ok", "skip"), ("fail", "fail"), ("fail", "skip"), ("skip", "skip")]
JM_WORD = {"ok": "SUCCEEDED", "fail": "FAILED", "skip": "SKIPPED"}


def JM(guard, mode, o1, o2):
    when = None if guard == "none" else guard
    roots, parents, edges, inputs = [], [], [], {}
    for p, o in (("p1", o1), ("p2", o2)):
        if o == "skip":
            r = "r" + p[1:]
            roots.append({"id": r})
            edges.append((r, p, "failed"))
            inputs[r] = "ok"
        parents.append({"id": p})
        inputs[p] = "fail" if o == "fail" else "ok"
    edges += [("p1", "j", when), ("p2", "j", when), ("j", "after")]
    inputs["after"] = "ok"
    inputs = {n["id"]: inputs[n["id"]] for n in roots + parents + [{"id": "after"}]}
    return dict(name="jm_%s_%s_%s_%s" % (guard, mode, o1, o2), fail_mode=CD,
                description="Join matrix: %s on both edges into j, mode %s, parents p1 %s and p2 %s%s; j feeds 'after' unconditionally."
                % ("no `when`" if when is None else "`when: %s`" % when, mode, JM_WORD[o1], JM_WORD[o2],
                   " (a SKIPPED parent pN is the not-taken `when: failed` branch of a succeeding root rN)" if "skip" in (o1, o2) else ""),
                nodes=roots + parents + [{"id": "j", "kind": "join", "mode": mode}, {"id": "after"}],
                edges=edges, inputs=inputs)


CASES += [JM(g, m, a, b) for g in JM_GUARDS for m in JM_MODES for (a, b) in JM_PAIRS]
