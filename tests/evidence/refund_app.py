"""The reference LangGraph app the evidence-plane tests drive: a support
agent that looks an order up (allowed), refunds it (a person must
approve) or deletes it (blocked), each call guarded by bl's bridge.

Every effect is one line appended to $EFFECTS, so a test counts what
really happened. The service is the one the test started: $BL_EVIDENCE_URL
with the token in $BL_EVIDENCE_TOKEN_FILE.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from bl_evidence import CoreClient, LangGraphBridge


class State(TypedDict, total=False):
    order: str
    tool: str
    amount: int
    evidence: dict[str, Any]
    tool_result: Any


def client() -> CoreClient:
    return CoreClient(os.environ["BL_EVIDENCE_URL"], token_file=os.environ["BL_EVIDENCE_TOKEN_FILE"])


def effect(args: dict[str, Any]) -> dict[str, Any]:
    """The consequential action: appends one line, and says so."""
    with open(os.environ["EFFECTS"], "a", encoding="utf-8") as f:
        f.write(json.dumps(args, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return {"done": args["tool"], "order": args["order"]}


def effects() -> list[dict[str, Any]]:
    try:
        with open(os.environ["EFFECTS"], encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def call_args(state: State) -> dict[str, Any]:
    return {"tool": state["tool"], "order": state["order"], "amount": state.get("amount", 0)}


def build(bridge: LangGraphBridge, *, tool_fn=effect) -> StateGraph:
    """decide -> call -> verify, for the tool the state names."""
    graph = StateGraph(State)
    graph.add_node("decide", bridge.make_decision_node(tool=lambda s: s["tool"], args=call_args))
    graph.add_node("call", bridge.make_guarded_node(tool_fn, args=call_args, result_key="tool_result"))
    graph.add_node("verify", bridge.make_verify_node(
        lambda s: (f"ledger:{s['order']}", "settled", "test-ledger") if s.get("tool") == "refund" else None))
    graph.add_edge(START, "decide")
    graph.add_edge("decide", "call")
    graph.add_edge("call", "verify")
    graph.add_edge("verify", END)
    return graph


def build_one_node(bridge: LangGraphBridge, *, tool_fn=effect) -> StateGraph:
    """The same app with the decision and the call as one node: call -> verify."""
    graph = StateGraph(State)
    graph.add_node("call", bridge.make_guarded_call_node(tool_fn, tool=lambda s: s["tool"], args=call_args,
                                                         result_key="tool_result"))
    graph.add_node("verify", bridge.make_verify_node(
        lambda s: (f"ledger:{s['order']}", "settled", "test-ledger") if s.get("tool") == "refund" else None))
    graph.add_edge(START, "call")
    graph.add_edge("call", "verify")
    graph.add_edge("verify", END)
    return graph


def review(verdict: str, operation_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """A person's review through `bl evidence VERDICT`, signed with the
    reviewer's key."""
    return subprocess.run(
        [os.environ["BL"], "evidence", verdict, operation_id, "--key", os.environ["REVIEWER_KEY"],
         "--url", os.environ["BL_EVIDENCE_URL"], "--token-file", os.environ["BL_EVIDENCE_TOKEN_FILE"], *extra],
        capture_output=True, text=True)


def pending_operation(result: dict[str, Any]) -> str | None:
    """The operation id a paused graph waits on, from its interrupt."""
    interrupts = result.get("__interrupt__") or ()
    return interrupts[0].value["operation_id"] if interrupts else None
