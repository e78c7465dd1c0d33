"""A real LangGraph app against a real `bl evidence serve`: allow, block,
approve, reject, a resume or a forged checkpoint that is not an approval,
a crash after the reservation, a tool that raises, an approval that
expired, a restart on SqliteSaver, the three LangGraph bug shapes (an
interrupt in a loop, a subgraph resume, a stale resume value, also as
reported: two pauses in one node and `invoke(None)`), and
model_completed recorded only from the app's own call. Run by
tests/tests/all/evidence.rs, which started the service; exits non-zero at
the first thing that does not hold."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

import refund_app as app
from bl_evidence import EvidenceGraphCallback, LangGraphBridge, Refused, SqliteDispatchLease, args_digest

HERE = os.path.dirname(os.path.abspath(__file__))
bridge = LangGraphBridge(app.client(), identity="alice@example.com")
memory = app.build(bridge).compile(checkpointer=InMemorySaver())


def thread() -> dict:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:12]}"}}


def effects_for(order: str) -> list[dict]:
    return [e for e in app.effects() if e["order"] == order]


def stage_of(out: dict) -> dict:
    """Where bl says the decision a graph's output names stands."""
    return bridge.client.decision(out["evidence"]["operation_id"]) or {}


def stage(op: str) -> str:
    return (bridge.client.decision(op) or {}).get("stage")


def raises(call, expected: type, says: str) -> None:
    """`call()` raises `expected`, whose message says `says`."""
    try:
        call()
    except expected as e:
        assert says in str(e), (says, e)
    else:
        raise AssertionError(f"accepted: {says}")


def allow() -> None:
    config = thread()
    out = memory.invoke({"order": "A-1", "tool": "lookup"}, config)
    assert out["evidence"]["status"] == "executed" and out["evidence"]["called"] is True, out
    assert out["tool_result"] == {"done": "lookup", "order": "A-1"}, out
    assert len(effects_for("A-1")) == 1
    # The same call again in the same thread is the same decision: executed
    # before, so not called now, and the update says so.
    again = memory.invoke({"order": "A-1", "tool": "lookup"}, config)
    assert again["evidence"]["status"] == "executed" and again["evidence"]["called"] is False, again
    assert len(effects_for("A-1")) == 1
    # bl holds the digest of what the tool returned (tool_result), not
    # the result itself.
    returned = "sha256:" + hashlib.sha256(repr(out["tool_result"]).encode()).hexdigest()
    assert stage_of(out)["tool_results"] == [returned], stage_of(out)
    # A receipt sent again (its answer lost) records neither event twice.
    op = out["evidence"]["operation_id"]
    raises(lambda: bridge.client.executed(op, ok=True, result_digest=returned), Refused,
           "execution is already recorded")
    assert stage_of(out)["tool_results"] == [returned], stage_of(out)


def block() -> None:
    out = memory.invoke({"order": "B-1", "tool": "delete"}, thread())
    assert out["evidence"]["status"] == "blocked", out
    assert "not a tool this policy allows" in out["evidence"]["reason"], out
    assert effects_for("B-1") == []


def approve() -> None:
    config = thread()
    callback = EvidenceGraphCallback()
    config["callbacks"] = [callback]
    paused = memory.invoke({"order": "C-1", "tool": "refund", "amount": 30}, config)
    op = app.pending_operation(paused)
    assert op and stage(op) == "awaiting_approval", paused
    assert effects_for("C-1") == []
    # The reason a reviewer is shown is the policy's answer to the call as
    # it stands, not its answer with an approval assumed.
    assert paused["__interrupt__"][0].value["reason"] == "refund needs a person's approval", paused
    reviewed = app.review("approve", op, "--valid-for", "10m")
    assert reviewed.returncode == 0, reviewed.stderr
    out = memory.invoke(Command(resume={"approved": True}), config)
    assert out["evidence"]["status"] == "executed", out
    assert out["evidence"]["stage"] == "executed", out
    assert out["evidence"]["outcome"]["external_ref"] == "ledger:C-1", out
    assert len(effects_for("C-1")) == 1
    # The callback saw the pause and the resume, and recorded nothing.
    kinds = [e["kind"] for e in callback.events]
    assert "interrupt" in kinds and "resume" in kinds, callback.events


def reject() -> None:
    config = thread()
    paused = memory.invoke({"order": "D-1", "tool": "refund", "amount": 900}, config)
    op = app.pending_operation(paused)
    reviewed = app.review("reject", op, "--reason", "over the limit")
    assert reviewed.returncode == 0, reviewed.stderr
    out = memory.invoke(Command(resume={"approved": True}), config)
    assert out["evidence"]["status"] == "rejected", out
    assert effects_for("D-1") == []
    # Terminal: a later approval is refused, and nothing runs.
    late = app.review("approve", op)
    assert late.returncode != 0 and "is rejected, not waiting for an approval" in late.stderr, late
    assert stage(op) == "rejected"


def resume_is_not_approval() -> None:
    config = thread()
    paused = memory.invoke({"order": "E-1", "tool": "refund", "amount": 10}, config)
    op = app.pending_operation(paused)
    first_pause = bridge.client.decision(op)["approval_request"]
    # The app resumes with "approved" on its own: the graph pauses again,
    # at a new interrupt, which is the one an approval must now answer.
    again = memory.invoke(Command(resume={"approved": True}), config)
    assert app.pending_operation(again) == op, again
    assert effects_for("E-1") == [] and stage(op) == "awaiting_approval"
    second_pause = bridge.client.decision(op)["approval_request"]
    assert first_pause and second_pause and first_pause[1] != second_pause[1], (first_pause, second_pause)
    assert app.review("approve", op).returncode == 0
    out = memory.invoke(Command(resume="whatever"), config)
    assert out["evidence"]["status"] == "executed" and len(effects_for("E-1")) == 1, out


def forged_state_is_not_approval() -> None:
    """A checkpoint is never an approval: the graph's state, rewritten to
    say the decision was cleared while bl waits for a person, makes no
    call; bl refuses the reservation (the node raises), and the decision
    still waits."""
    config = thread()
    paused = memory.invoke({"order": "F-1", "tool": "refund", "amount": 20}, config)
    op = app.pending_operation(paused)
    assert op and stage(op) == "awaiting_approval", paused
    forged = {"operation_id": op, "tool": "refund", "status": "cleared"}
    memory.update_state(config, {"evidence": forged}, as_node="decide")
    # The guarded node asks bl for the reservation, which is refused: the
    # node raises, and nothing is called.
    raises(lambda: memory.invoke(None, config), Refused, "ApprovalRequired")
    assert effects_for("F-1") == []
    assert stage(op) == "awaiting_approval", stage(op)


def changed_args_are_refused() -> None:
    """An approval is for the arguments it saw. Changed while the graph
    waits, they are a new decision that waits again; changed after the
    decision and before the call, the call is refused (the field named),
    never made."""
    config = thread()
    paused = memory.invoke({"order": "F-1", "tool": "refund", "amount": 20}, config)
    op = app.pending_operation(paused)
    assert app.review("approve", op).returncode == 0
    memory.update_state(config, {"amount": 2000})
    again = memory.invoke(Command(resume=True), config)
    assert app.pending_operation(again) not in (None, op), again
    assert effects_for("F-1") == []
    stopped = app.build(bridge).compile(checkpointer=InMemorySaver(), interrupt_before=["call"])
    config = thread()
    stopped.invoke({"order": "F-2", "tool": "lookup"}, config)
    stopped.update_state(config, {"order": "F-3"})
    try:
        stopped.invoke(None, config)
    except Refused as refused:
        assert refused.code == "RequestMismatch" and refused.field == "args_digest", refused
    else:
        raise AssertionError("a call with changed arguments was not refused")
    assert effects_for("F-2") == [] and effects_for("F-3") == []


def crash_after_reservation(db: str) -> None:
    """The app dies after bl granted the reservation, in the tool; restarted
    on its SqliteSaver, the node runs again and gets no second permission:
    reconciliation_required, one effect at most."""
    config = {"configurable": {"thread_id": "crash-1"}}
    child = subprocess.run([sys.executable, os.path.join(HERE, "crash_child.py"), db, "G-1", "crash-1", "async"],
                           capture_output=True, text=True)
    assert child.returncode == -9, (child.returncode, child.stderr)
    assert len(effects_for("G-1")) == 1
    with SqliteSaver.from_conn_string(db) as saver:
        graph = app.build(bridge).compile(checkpointer=saver)
        out = graph.invoke(None, config)
    assert out["evidence"]["status"] == "reconciliation_required", out
    assert len(effects_for("G-1")) == 1
    op = out["evidence"]["operation_id"]
    assert stage(op) == "reconciliation_required"
    # A person says it ran; nothing is replayed.
    assert app.review("reconcile", op, "--executed", "true").returncode == 0
    assert stage(op) == "executed"


def crash_with_durability_exit(db: str) -> None:
    """As above, but LangGraph saves its checkpoint only when the run exits
    (durability="exit"): restarted, the run begins again at the decision,
    which finds the decision reserved; the guarded node records
    reconciliation_required and does not call the tool."""
    config = {"configurable": {"thread_id": "crash-exit"}}
    child = subprocess.run([sys.executable, os.path.join(HERE, "crash_child.py"), db, "G-2", "crash-exit", "exit"],
                           capture_output=True, text=True)
    assert child.returncode == -9, (child.returncode, child.stderr)
    with SqliteSaver.from_conn_string(db) as saver:
        graph = app.build(bridge).compile(checkpointer=saver)
        out = graph.invoke({"order": "G-2", "tool": "lookup"}, config, durability="exit")
    assert out["evidence"]["status"] == "reconciliation_required", out
    assert stage(out["evidence"]["operation_id"]) == "reconciliation_required"
    assert len(effects_for("G-2")) == 1


def tool_raises() -> None:
    """A tool that raises may have acted before it did: a person decides,
    and the call is not made again."""
    def failing(args):
        app.effect(args)
        raise RuntimeError("the payment API timed out")

    graph = app.build(bridge, tool_fn=failing).compile(checkpointer=InMemorySaver())
    config = thread()
    out = graph.invoke({"order": "K-1", "tool": "lookup"}, config)
    assert out["evidence"]["status"] == "reconciliation_required", out
    assert "payment API timed out" in out["evidence"]["error"], out
    assert stage(out["evidence"]["operation_id"]) == "reconciliation_required"
    again = graph.invoke({"order": "K-1", "tool": "lookup"}, config)
    assert again["evidence"]["status"] == "reconciliation_required", again
    assert len(effects_for("K-1")) == 1


def expired_approval() -> None:
    """An approval that expires before the call is no authority; asked
    again, the app pauses at a new interrupt, and a fresh approval lets the
    call through, once."""
    config = thread()
    paused = memory.invoke({"order": "X-1", "tool": "refund", "amount": 3}, config)
    op = app.pending_operation(paused)
    assert app.review("approve", op, "--valid-for", "1s").returncode == 0
    time.sleep(2.2)
    out = memory.invoke(Command(resume=True), config)
    assert out["evidence"]["status"] == "approval_expired", out
    assert effects_for("X-1") == []
    # Asked for the call directly, bl refuses and names what no longer holds.
    call = app.call_args({"order": "X-1", "tool": "refund", "amount": 3})
    try:
        bridge.client.reserve(op, tool="refund", args_digest=args_digest(call))
    except Refused as refused:
        assert (refused.code, refused.field) == ("ApprovalExpired", "expires_at"), (refused.code, refused.field)
    else:
        raise AssertionError("an expired approval granted a reservation")
    again = memory.invoke({"order": "X-1", "tool": "refund", "amount": 3}, config)
    assert app.pending_operation(again) == op, again
    assert stage(op) == "awaiting_approval"
    assert app.review("approve", op).returncode == 0
    done = memory.invoke(Command(resume=True), config)
    assert done["evidence"]["status"] == "executed" and len(effects_for("X-1")) == 1, done


def restart_on_sqlite(db: str) -> None:
    """Paused in one process, approved, resumed in another."""
    config = {"configurable": {"thread_id": "sqlite-1"}}
    with SqliteSaver.from_conn_string(db) as saver:
        paused = app.build(bridge).compile(checkpointer=saver).invoke(
            {"order": "H-1", "tool": "refund", "amount": 5}, config)
    op = app.pending_operation(paused)
    assert app.review("approve", op).returncode == 0
    child = subprocess.run([sys.executable, os.path.join(HERE, "resume_child.py"), db, "sqlite-1"],
                           capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout)["evidence"]["status"] == "executed", child.stdout
    assert len(effects_for("H-1")) == 1


def interrupt_in_a_loop() -> None:
    """langgraph#7780: an interrupt in a loop, resumed more often than it
    paused. Every extra resume finds the call made: one effect each."""
    graph = StateGraph(app.State)
    graph.add_node("decide", bridge.make_decision_node(tool=lambda s: s["tool"], args=app.call_args))
    graph.add_node("call", bridge.make_guarded_node(app.effect, args=app.call_args))
    graph.add_node("next", lambda s: {"amount": s["amount"] + 1})
    graph.add_edge(START, "decide")
    graph.add_edge("decide", "call")
    graph.add_edge("call", "next")
    graph.add_conditional_edges("next", lambda s: END if s["amount"] > 2 else "decide")
    loop = graph.compile(checkpointer=InMemorySaver())
    config = thread()
    result = loop.invoke({"order": "L-1", "tool": "refund", "amount": 1}, config)
    for _ in range(8):  # more resumes than pauses
        op = app.pending_operation(result)
        if op and stage(op) == "awaiting_approval":
            assert app.review("approve", op).returncode == 0
        result = loop.invoke(Command(resume={"approved": True}), config)
    amounts = Counter(e["amount"] for e in effects_for("L-1"))
    assert amounts == Counter({1: 1, 2: 1}), amounts


def subgraph_resume() -> None:
    """langgraph#6792: resuming a subgraph runs its earlier tasks again.
    The lookup before the pause is not made twice."""
    inner = StateGraph(app.State)
    inner.add_node("look", lambda s: {"tool": "lookup"})
    inner.add_node("decide_lookup", bridge.make_decision_node(tool="lookup", args=app.call_args))
    inner.add_node("call_lookup", bridge.make_guarded_node(app.effect, args=app.call_args))
    inner.add_node("refund", lambda s: {"tool": "refund"})
    inner.add_node("decide_refund", bridge.make_decision_node(tool="refund", args=app.call_args))
    inner.add_node("call_refund", bridge.make_guarded_node(app.effect, args=app.call_args))
    for a, b in [(START, "look"), ("look", "decide_lookup"), ("decide_lookup", "call_lookup"),
                 ("call_lookup", "refund"), ("refund", "decide_refund"), ("decide_refund", "call_refund"),
                 ("call_refund", END)]:
        inner.add_edge(a, b)
    sub = inner.compile()
    outer = StateGraph(app.State)
    # Invoked from inside a node: on resume the node, and so the whole
    # subgraph, runs again from its start.
    outer.add_node("work", lambda s: sub.invoke(s))
    outer.add_edge(START, "work")
    outer.add_edge("work", END)
    graph = outer.compile(checkpointer=InMemorySaver())
    config = thread()
    paused = graph.invoke({"order": "S-1", "tool": "lookup", "amount": 7}, config)
    op = app.pending_operation(paused)
    assert op, paused
    assert app.review("approve", op).returncode == 0
    graph.invoke(Command(resume=True), config)
    tools = Counter(e["tool"] for e in effects_for("S-1"))
    assert tools == Counter({"lookup": 1, "refund": 1}), tools


def stale_resume_value() -> None:
    """langgraph#8837: a resume value consumed by one interrupt answers a
    later one. Two refunds need approval; only the first is approved, and
    one resume value is sent: the second is not made."""
    config = thread()
    first = memory.invoke({"order": "R-1", "tool": "refund", "amount": 1}, config)
    op1 = app.pending_operation(first)
    assert app.review("approve", op1).returncode == 0
    memory.invoke(Command(resume={"approved": True}), config)
    # The same thread goes on to a second refund, and the stale value is
    # sent again.
    config2 = dict(config)
    second = memory.invoke({"order": "R-1", "tool": "refund", "amount": 2}, config2)
    op2 = app.pending_operation(second)
    assert op2 and op2 != op1, (op1, op2)
    again = memory.invoke(Command(resume={"approved": True}), config2)
    assert app.pending_operation(again) == op2, again
    assert [e["amount"] for e in effects_for("R-1")] == [1]
    # bl's approval for the first decision is no authority for the second.
    assert stage(op2) == "awaiting_approval"


def two_pauses_in_one_node() -> None:
    """langgraph#8837 as reported: one node pauses twice, and after the
    first pause is resumed, `invoke(None)` hands the consumed resume value
    to the second. Under the bridge that value answers nothing: the second
    refund waits for its own approval, and each refund is made once."""
    first = LangGraphBridge(app.client(), identity="alice@example.com", state_key="first")
    second = LangGraphBridge(app.client(), identity="alice@example.com", state_key="second")

    def refund(amount: int):
        return lambda s: {"tool": "refund", "order": s["order"], "amount": amount}

    decide_first = first.make_decision_node(tool="refund", args=refund(1))
    decide_second = second.make_decision_node(tool="refund", args=refund(2))

    def decide_both(state, config):
        # Two interrupts in one node, as in the report.
        return {**decide_first(state, config), **decide_second(state, config)}

    class Two(app.State, total=False):
        first: dict
        second: dict

    graph = StateGraph(Two)
    graph.add_node("decide", decide_both)
    graph.add_node("call_first", first.make_guarded_node(app.effect, args=refund(1)))
    graph.add_node("call_second", second.make_guarded_node(app.effect, args=refund(2)))
    for a, b in [(START, "decide"), ("decide", "call_first"), ("call_first", "call_second"), ("call_second", END)]:
        graph.add_edge(a, b)
    two = graph.compile(checkpointer=InMemorySaver())
    config = thread()
    paused = two.invoke({"order": "P-1"}, config)
    op1 = app.pending_operation(paused)
    assert op1, paused
    assert app.review("approve", op1).returncode == 0
    paused = two.invoke(Command(resume={"approved": True}), config)
    op2 = app.pending_operation(paused)
    assert op2 and op2 != op1, (op1, paused)
    # The report's step: invoke(None) while the second pause is pending.
    again = two.invoke(None, config)
    assert app.pending_operation(again) == op2, again
    assert stage(op2) == "awaiting_approval"
    assert effects_for("P-1") == []
    assert app.review("approve", op2).returncode == 0
    done = two.invoke(Command(resume={"approved": True}), config)
    assert done["first"]["status"] == done["second"]["status"] == "executed", done
    assert sorted(e["amount"] for e in effects_for("P-1")) == [1, 2], effects_for("P-1")


def model_completed_only_from_the_app() -> None:
    """seed 004: `model_completed` is the app's to say, from its explicit
    call; a guarded call through the bridge records none of its own."""
    out = memory.invoke({"order": "MC-1", "tool": "lookup"}, thread())
    assert out["evidence"]["status"] == "executed", out
    op = out["evidence"]["operation_id"]
    assert bridge.client.decision(op)["model_outputs"] == [], bridge.client.decision(op)
    said = args_digest({"model": "answered", "order": "MC-1"})
    bridge.client.model_completed(op, said)
    assert bridge.client.decision(op)["model_outputs"] == [said], bridge.client.decision(op)


def dispatch_lease(tmp: str) -> None:
    try:
        LangGraphBridge(bridge.client, identity="x", require_dispatch_lease=True)
    except ValueError:
        pass
    else:
        raise AssertionError("require_dispatch_lease=True without a lease was accepted")
    leased = LangGraphBridge(bridge.client, identity="alice@example.com",
                             dispatch_lease=SqliteDispatchLease(os.path.join(tmp, "lease.db")),
                             require_dispatch_lease=True, digest_key=b"the app's own secret")
    out = app.build(leased).compile(checkpointer=InMemorySaver()).invoke({"order": "Q-1", "tool": "lookup"}, thread())
    assert out["evidence"]["status"] == "executed" and len(effects_for("Q-1")) == 1, out
    # Keyed, the digest bl holds cannot be guessed back from likely values.
    keyed = out["evidence"]["args_digest"]
    plain = args_digest({"tool": "lookup", "order": "Q-1", "amount": 0})
    assert keyed.startswith("hmac-sha256:") and keyed[len("hmac-"):] != plain, (keyed, plain)
    assert bridge.client.decision(out["evidence"]["operation_id"])["binding"]["args_digest"] == keyed


def async_app() -> None:
    """The same app with an async tool and an async observe, run with
    ainvoke: the tool is awaited once, an approval pauses and resumes, and a
    sync tool that only returns a coroutine is never recorded as executed."""
    import asyncio

    async def effect(args: dict) -> dict:
        await asyncio.sleep(0)
        return app.effect(args)

    async def observe(state: dict):
        await asyncio.sleep(0)
        return (f"ledger:{state['order']}", "settled", "test-ledger") if state.get("tool") == "refund" else None

    graph = StateGraph(app.State)
    graph.add_node("decide", bridge.make_decision_node(tool=lambda s: s["tool"], args=app.call_args))
    graph.add_node("call", bridge.make_guarded_node(effect, args=app.call_args, result_key="tool_result"))
    graph.add_node("verify", bridge.make_verify_node(observe))
    graph.add_edge(START, "decide")
    graph.add_edge("decide", "call")
    graph.add_edge("call", "verify")
    graph.add_edge("verify", END)
    compiled = graph.compile(checkpointer=InMemorySaver())

    async def run() -> None:
        out = await compiled.ainvoke({"order": "AS-1", "tool": "lookup"}, thread())
        assert out["evidence"]["status"] == "executed", out
        assert out["tool_result"] == {"done": "lookup", "order": "AS-1"}, out
        assert len(effects_for("AS-1")) == 1
        config = thread()
        paused = await compiled.ainvoke({"order": "AS-2", "tool": "refund", "amount": 5}, config)
        op = app.pending_operation(paused)
        assert op and stage(op) == "awaiting_approval" and effects_for("AS-2") == [], paused
        assert app.review("approve", op).returncode == 0
        out = await compiled.ainvoke(Command(resume=True), config)
        assert out["evidence"]["status"] == "executed", out
        assert out["evidence"]["outcome"]["external_ref"] == "ledger:AS-2", out
        assert out["evidence"]["stage"] == "executed" and len(effects_for("AS-2")) == 1, out

    asyncio.run(run())

    # An async tool that forgets to await its work: it never ran.
    async def forgets(args: dict):
        return effect(args)

    lazy = app.build(bridge, tool_fn=forgets).compile(checkpointer=InMemorySaver())
    config = thread()
    raises(lambda: asyncio.run(lazy.ainvoke({"order": "AS-4", "tool": "lookup"}, config)), TypeError,
           "returned an awaitable or a generator")
    assert effects_for("AS-4") == []
    op = lazy.get_state(config).values["evidence"]["operation_id"]
    assert stage(op) == "reconciliation_required", stage(op)

    # A sync tool that only returns a coroutine: it never ran, and bl is
    # not told it executed.
    def looks_sync(args: dict):
        return effect(args)

    wrong = app.build(bridge, tool_fn=looks_sync).compile(checkpointer=InMemorySaver())
    config = thread()
    raises(lambda: wrong.invoke({"order": "AS-3", "tool": "lookup"}, config), TypeError,
           "returned an awaitable or a generator")
    assert effects_for("AS-3") == []
    op = bridge.client.decision(wrong.get_state(config).values["evidence"]["operation_id"])
    assert op["stage"] == "reconciliation_required", op


def observed_outcomes() -> None:
    """What `observe` returns is recorded as it says, as a dict or a tuple;
    anything else (a dict with other keys, a string, an empty field) is
    refused before anything is recorded, never unpacked into an outcome."""

    def graph_with(observe) -> object:
        graph = StateGraph(app.State)
        graph.add_node("decide", bridge.make_decision_node(tool=lambda s: s["tool"], args=app.call_args))
        graph.add_node("call", bridge.make_guarded_node(app.effect, args=app.call_args, result_key="tool_result"))
        graph.add_node("verify", bridge.make_verify_node(observe))
        graph.add_edge(START, "decide")
        graph.add_edge("decide", "call")
        graph.add_edge("call", "verify")
        graph.add_edge("verify", END)
        return graph.compile(checkpointer=InMemorySaver())

    as_dict = graph_with(lambda s: {"external_ref": f"psp:{s['order']}", "status": "settled", "source": "psp"})
    out = as_dict.invoke({"order": "O-1", "tool": "lookup"}, thread())
    expected = {"external_ref": "psp:O-1", "status": "settled", "source": "psp"}
    assert out["evidence"]["outcome"] == expected, out
    assert stage_of(out)["outcomes"] == 1, stage_of(out)  # bl counts the outcomes recorded

    for order, seen, says in [
        ("O-2", {"ref": "x", "status": "ok", "source": "db"}, "missing ['external_ref'], unknown ['ref']"),
        ("O-3", "abc", "return a dict with"),
        ("O-4", ("psp:O-4", "", "psp"), "status=''"),
        ("O-5", ("psp:O-5", "settled"), "return a dict with"),
    ]:
        config = thread()
        wrong = graph_with(lambda s, seen=seen: seen)
        raises(lambda: wrong.invoke({"order": order, "tool": "lookup"}, config), TypeError, says)
        # The call itself ran once and is recorded; no outcome was.
        assert len(effects_for(order)) == 1
        op = wrong.get_state(config).values["evidence"]["operation_id"]
        decided = bridge.client.decision(op)
        assert decided["stage"] == "executed" and decided["outcomes"] == 0, decided


def user_mistakes() -> None:
    """What an app gets wrong is said, and nothing is recorded or run."""
    import datetime

    from bl_evidence import CoreClient, EvidenceError

    # No thread: the default operation id would make every such call one.
    stateless = app.build(bridge).compile()
    raises(lambda: stateless.invoke({"order": "M-1", "tool": "lookup"}), ValueError, "no thread_id")
    # No checkpointer: a pause could never be resumed, so nothing is proposed.
    raises(lambda: stateless.invoke({"order": "M-1", "tool": "refund", "amount": 1}, thread()), ValueError,
           "this graph has no checkpointer")
    # Nobody to act for.
    raises(lambda: LangGraphBridge(bridge.client, identity=" "), ValueError, "identity=")
    # A guarded node with no decision before it.
    lone = StateGraph(app.State)
    lone.add_node("call", bridge.make_guarded_node(app.effect, args=app.call_args))
    lone.add_edge(START, "call")
    lone.add_edge("call", END)
    raises(lambda: lone.compile().invoke({"order": "M-2", "tool": "lookup"}, thread()), ValueError,
            "no decision in state['evidence']")
    # Arguments that are not JSON cannot be digested.
    raises(lambda: args_digest({"when": datetime.date(2026, 1, 1)}), TypeError, "must be JSON values")
    # The service's URL with another path is no evidence API.
    url = os.environ["BL_EVIDENCE_URL"]
    wrong = CoreClient(url.rsplit("/v1", 1)[0] + "/v2", token_file=os.environ["BL_EVIDENCE_TOKEN_FILE"])
    raises(lambda: wrong.decision("op-x"), EvidenceError, "is not an evidence service's API (404)")
    # The service refuses a binding with an empty field, naming it.
    raises(lambda: bridge.client.propose(operation_id="op-m3", thread_id="t", identity="", tool="lookup",
                                          args_digest="sha256:aa"), EvidenceError, "`identity` is empty")
    assert bridge.client.decision("op-m3") is None
    # A tool that raised returned nothing: a result with its failure is refused.
    raises(lambda: bridge.client.executed("op-m3", ok=False, result_digest="sha256:aa"), EvidenceError,
           "a tool that raised returned nothing")
    assert effects_for("M-1") == [] and effects_for("M-2") == []


def leases(tmp: str) -> None:
    """Two async guarded calls share a lease without stalling the event
    loop; a lease held elsewhere past its timeout is said as such, and
    nothing is reserved."""
    import asyncio
    import sqlite3

    from bl_evidence import LeaseTimeout

    path = os.path.join(tmp, "async-lease.db")
    leased = LangGraphBridge(bridge.client, identity="alice@example.com",
                             dispatch_lease=SqliteDispatchLease(path, timeout=10), require_dispatch_lease=True)

    async def slow_effect(args: dict) -> dict:
        await asyncio.sleep(0.2)
        return app.effect(args)

    def branch(graph: StateGraph, key: str, order: str) -> None:
        both = lambda s: {"tool": "lookup", "order": order, "amount": 0}  # noqa: E731
        one = LangGraphBridge(bridge.client, identity="alice@example.com", state_key=key,
                              dispatch_lease=leased.dispatch_lease)
        graph.add_node(f"decide-{key}", one.make_decision_node(tool="lookup", args=both))
        graph.add_node(f"call-{key}", one.make_guarded_node(slow_effect, args=both))
        graph.add_edge(START, f"decide-{key}")
        graph.add_edge(f"decide-{key}", f"call-{key}")
        graph.add_edge(f"call-{key}", END)

    class Two(app.State, total=False):
        a: dict
        b: dict

    graph = StateGraph(Two)
    branch(graph, "a", "LEASE-1")
    branch(graph, "b", "LEASE-2")
    compiled = graph.compile(checkpointer=InMemorySaver())

    async def run() -> tuple[dict, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        beat = asyncio.create_task(ticker())
        out = await compiled.ainvoke({}, thread())
        beat.cancel()
        return out, ticks

    out, ticks = asyncio.run(run())
    assert out["a"]["status"] == "executed" and out["b"]["status"] == "executed", out
    assert len(effects_for("LEASE-1")) == 1 and len(effects_for("LEASE-2")) == 1, (effects_for("LEASE-1"), effects_for("LEASE-2"), out)
    # The second call waited about 0.2 s for the lease; the loop kept going.
    assert ticks >= 10, ticks

    # Held by another process past the timeout: said, and nothing reserved.
    short = LangGraphBridge(bridge.client, identity="alice@example.com",
                            dispatch_lease=SqliteDispatchLease(path, timeout=0.3))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    config = thread()
    graph = app.build(short).compile(checkpointer=InMemorySaver())
    try:
        raises(lambda: graph.invoke({"order": "LEASE-3", "tool": "lookup"}, config), LeaseTimeout,
               "held by another dispatch")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert effects_for("LEASE-3") == []
    op = graph.get_state(config).values["evidence"]["operation_id"]
    assert stage(op) == "cleared", stage(op)

    # Cancelled while it waits for the lease: nothing is reserved, and the
    # lease is free once the other dispatch lets go.
    async def cancelled_run(order: str, hold_lease: bool, after: float) -> str:
        one = app.build(leased, tool_fn=slow_effect).compile(checkpointer=InMemorySaver())
        config = thread()
        held = sqlite3.connect(path, isolation_level=None)
        if hold_lease:
            held.execute("BEGIN IMMEDIATE")
        task = asyncio.create_task(one.ainvoke({"order": order, "tool": "lookup"}, config))
        await asyncio.sleep(after)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        if hold_lease:
            held.execute("ROLLBACK")
        held.close()
        await asyncio.sleep(0.5)  # what the cancel left to the call's thread
        free = sqlite3.connect(path, isolation_level=None, timeout=2)
        free.execute("BEGIN IMMEDIATE")
        free.execute("ROLLBACK")
        free.close()
        return one.get_state(config).values["evidence"]["operation_id"]

    op = asyncio.run(cancelled_run("LEASE-4", hold_lease=True, after=0.3))
    assert stage(op) == "cleared" and effects_for("LEASE-4") == [], stage(op)
    # Cancelled while the tool is awaited: whether it acted is unknown, and
    # bl says so; the lease is given back.
    op = asyncio.run(cancelled_run("LEASE-5", hold_lease=False, after=0.1))
    assert stage(op) == "reconciliation_required", stage(op)
    assert effects_for("LEASE-5") == []


def one_node(db: str) -> None:
    """The decision and the call as one node (make_guarded_call_node):
    allowed, blocked, approved (a resume before the review pauses again)
    and rejected as with two nodes; and a node run again after its
    reservation, the app having died in the tool, calls nothing."""
    graph = app.build_one_node(bridge).compile(checkpointer=InMemorySaver())
    out = graph.invoke({"order": "N-1", "tool": "lookup"}, thread())
    assert out["evidence"]["status"] == "executed", out
    assert out["tool_result"] == {"done": "lookup", "order": "N-1"}, out
    assert stage(out["evidence"]["operation_id"]) == "executed" and len(effects_for("N-1")) == 1
    out = graph.invoke({"order": "N-2", "tool": "delete"}, thread())
    assert out["evidence"]["status"] == "blocked" and effects_for("N-2") == [], out
    config = thread()
    paused = graph.invoke({"order": "N-3", "tool": "refund", "amount": 30}, config)
    op = app.pending_operation(paused)
    assert op and stage(op) == "awaiting_approval" and effects_for("N-3") == [], paused
    again = graph.invoke(Command(resume={"approved": True}), config)
    assert app.pending_operation(again) == op and effects_for("N-3") == [], again
    assert app.review("approve", op).returncode == 0
    out = graph.invoke(Command(resume={"approved": True}), config)
    assert out["evidence"]["status"] == "executed" and out["evidence"]["stage"] == "executed", out
    assert len(effects_for("N-3")) == 1
    config = thread()
    paused = graph.invoke({"order": "N-4", "tool": "refund", "amount": 900}, config)
    assert app.review("reject", app.pending_operation(paused), "--reason", "over the limit").returncode == 0
    out = graph.invoke(Command(resume={"approved": True}), config)
    assert out["evidence"]["status"] == "rejected" and effects_for("N-4") == [], out
    child = subprocess.run([sys.executable, os.path.join(HERE, "crash_child.py"), db, "N-5", "one-node", "sync",
                            "one-node"], capture_output=True, text=True)
    assert child.returncode == -9, (child.returncode, child.stderr)
    assert len(effects_for("N-5")) == 1
    with SqliteSaver.from_conn_string(db) as saver:
        out = app.build_one_node(bridge).compile(checkpointer=saver).invoke(
            None, {"configurable": {"thread_id": "one-node"}})
    assert out["evidence"]["status"] == "reconciliation_required", out
    assert stage(out["evidence"]["operation_id"]) == "reconciliation_required"
    assert len(effects_for("N-5")) == 1
    # Under a dispatch lease: held from the proposal to the receipt, and
    # given back when the node pauses for a person.
    lease = SqliteDispatchLease(os.path.join(os.path.dirname(db), "one-node-lease.db"), timeout=2.0)
    leased = app.build_one_node(LangGraphBridge(bridge.client, identity="alice@example.com", dispatch_lease=lease,
                                                require_dispatch_lease=True)).compile(checkpointer=InMemorySaver())
    out = leased.invoke({"order": "N-6", "tool": "lookup"}, thread())
    assert out["evidence"]["status"] == "executed" and len(effects_for("N-6")) == 1, out
    paused = leased.invoke({"order": "N-7", "tool": "refund", "amount": 5}, thread())
    with lease.hold(app.pending_operation(paused)):
        pass
    # An async tool is refused when the node is built, not at the call.
    async def later(args):
        return args

    raises(lambda: bridge.make_guarded_call_node(later, tool="lookup", args=app.call_args), TypeError,
           "put make_decision_node before make_guarded_node")


def main() -> None:
    tmp = os.environ["WORK"]
    ran = []
    for name, case in [
        ("allow", allow), ("block", block), ("approve", approve), ("reject", reject),
        ("resume_is_not_approval", resume_is_not_approval), ("forged_state_is_not_approval", forged_state_is_not_approval),
        ("changed_args_are_refused", changed_args_are_refused),
        ("crash_after_reservation", lambda: crash_after_reservation(os.path.join(tmp, "crash.db"))),
        ("crash_with_durability_exit", lambda: crash_with_durability_exit(os.path.join(tmp, "crash-exit.db"))),
        ("tool_raises", tool_raises), ("expired_approval", expired_approval),
        ("restart_on_sqlite", lambda: restart_on_sqlite(os.path.join(tmp, "restart.db"))),
        ("interrupt_in_a_loop", interrupt_in_a_loop), ("subgraph_resume", subgraph_resume),
        ("stale_resume_value", stale_resume_value), ("two_pauses_in_one_node", two_pauses_in_one_node),
        ("model_completed_only_from_the_app", model_completed_only_from_the_app),
        ("dispatch_lease", lambda: dispatch_lease(tmp)),
        ("async_app", async_app), ("observed_outcomes", observed_outcomes), ("user_mistakes", user_mistakes), ("leases", lambda: leases(tmp)),
        ("one_node", lambda: one_node(os.path.join(tmp, "one-node.db"))),
    ]:
        print(f"--- {name}", file=sys.stderr, flush=True)
        case()
        ran.append(name)
    print(json.dumps({"passed": ran, "effects": len(app.effects())}))


if __name__ == "__main__":
    main()
