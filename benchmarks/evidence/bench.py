"""The cost bl's bridge adds to a guarded LangGraph step (issue 34).

The same call runs N times in five forms, on a SqliteSaver, each run one
invoke with durability="sync", the forms in turn, one run each, so a
moment the machine is slow lands on all of them alike:

- plain call: one node that calls the tool, without bl;
- guarded call: that node as the bridge's make_guarded_call_node (one
  request proposes the call and takes the reservation, one records the
  receipt);
- plain: decide -> call, neither node speaking to bl;
- decided: the bridge's decision node (the proposal and the policy), then
  the plain call;
- guarded: the bridge's decision node, then its guarded node (the
  reservation, the call, the receipt).

What the bridge adds is the guarded form minus its plain form, the same
graph with and without it (issue 34's measure), at p50 and p99: the
target is held on the one-node form, the bridge's shortest way to guard
a call; the two-node form is printed, split into the decision step
(decided minus plain) and the guarded step (guarded minus decided).
Exits 1 when the one-node form adds more than the target at p99. With
it, the range that figure takes over bootstrap resamples of the same
runs: how much of it is sampling alone.

Then where that goes: the service's round trips timed from a plain
client loop (the proposal, the reservation, the receipt, and the one
node's proposal that also reserves), and both guarded forms run with a
client that answers at once without the service (what the bridge's
nodes cost LangGraph by themselves). Those are printed only.

    python bench.py URL TOKEN_FILE WORKDIR [N]
"""

import json
import os
import random
import statistics
import sys
import time
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from bl_evidence import CoreClient, LangGraphBridge
from bl_evidence.client import args_digest

TARGET_MS = 2.0


class State(TypedDict, total=False):
    n: int
    evidence: dict[str, Any]
    tool_result: Any


def tool(args):
    return {"looked_up": args["n"]}


def args(state):
    return {"n": state["n"]}


def graph(decide, call):
    g = StateGraph(State)
    g.add_node("decide", decide)
    g.add_node("call", call)
    g.add_edge(START, "decide")
    g.add_edge("decide", "call")
    g.add_edge("call", END)
    return g


def plain_call(state):
    return {"tool_result": tool(args(state))}


def plain_graph():
    return graph(lambda s: {}, plain_call)


def bridged_graph(bridge, guarded):
    decide = bridge.make_decision_node(tool="lookup", args=args, operation_id=operation)
    call = bridge.make_guarded_node(tool, args=args, result_key="tool_result") if guarded else plain_call
    return graph(decide, call)


def p99_interval(guarded, plain, resamples=400):
    """How far the p99 difference moves from sampling alone: each form's
    times drawn again with replacement, the difference's middle 95%. One
    p99 of a few thousand calls rests on its few dozen slowest."""
    draw = random.Random(34)
    diffs = sorted(pct(draw.choices(guarded, k=len(guarded)), 99) - pct(draw.choices(plain, k=len(plain)), 99)
                   for _ in range(resamples))
    return diffs[int(0.025 * resamples)], diffs[int(0.975 * resamples) - 1]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class InstantClient(CoreClient):
    """Answers every request at once, as the service would a cleared one,
    without a service: a measuring device for the bridge's own cost."""

    ANSWER = json.dumps({"sequence": 1, "event_hash": "sha256:00", "stage": "cleared", "retry": False,
                         "receipt": "00", "policy": {"reason": "allowed"},
                         "reservation": {"sequence": 2, "event_hash": "sha256:00", "stage": "reserved",
                                         "retry": False, "receipt": "00"}}).encode()

    def _exchange(self, request: bytes) -> tuple[int, bytes]:
        return 200, self.ANSWER


def round_trips(url, token_file, n):
    """The service's requests of a guarded call, each timed alone: the two
    nodes' three, and the one node's proposal that also reserves."""
    client = CoreClient(url, token_file=token_file)
    run = str(int(time.time() * 1000))
    took = {"proposal": [], "reservation": [], "receipt": [], "reserving proposal": []}
    for i in range(n):
        op, digest = f"rt-{run}-{i}", args_digest({"n": i})
        for name, call in (
            ("proposal", lambda: client.propose(operation_id=op, thread_id="rt", identity="bench",
                                                tool="lookup", args_digest=digest)),
            ("reservation", lambda: client.reserve(op, tool="lookup", args_digest=digest)),
            ("receipt", lambda: client.executed(op, ok=True)),
            ("reserving proposal", lambda: client.propose(operation_id=f"{op}-one", thread_id="rt", identity="bench",
                                                          tool="lookup", args_digest=digest, reserve=True)),
        ):
            t0 = time.perf_counter()
            call()
            took[name].append((time.perf_counter() - t0) * 1000)
    client.close()
    return {name: xs[min(20, len(xs) // 10):] for name, xs in took.items()}


def without_service(work, n):
    """The plain and guarded forms, the guarded ones with instant answers."""
    bridge = LangGraphBridge(InstantClient("http://127.0.0.1:9/v1", token="none"), identity="bench")
    times = {"plain": [], "guarded": [], "plain call": [], "guarded call": []}
    run = str(int(time.time() * 1000))
    with SqliteSaver.from_conn_string(os.path.join(work, f"instant-{run}.db")) as saver:
        graphs = {"plain": plain_graph().compile(checkpointer=saver),
                  "guarded": bridged_graph(bridge, guarded=True).compile(checkpointer=saver),
                  "plain call": one_node_graph(plain_call).compile(checkpointer=saver),
                  "guarded call": one_node_graph(guarded_call_node(bridge)).compile(checkpointer=saver)}
        for i in range(n + 20):
            for name, graph in graphs.items():
                config = {"configurable": {"thread_id": f"{name}-{run}"}}
                t0 = time.perf_counter()
                graph.invoke({"n": i}, config, durability="sync")
                if i >= 20:
                    times[name].append((time.perf_counter() - t0) * 1000)
    return times


def operation(state, config):
    return f"{config['configurable']['thread_id']}-{state['n']}"


def guarded_call_node(bridge):
    return bridge.make_guarded_call_node(tool, tool="lookup", args=args, operation_id=operation,
                                         result_key="tool_result")


def one_node_graph(node):
    g = StateGraph(State)
    g.add_node("call", node)
    g.add_edge(START, "call")
    g.add_edge("call", END)
    return g


def main():
    url, token_file, work = sys.argv[1:4]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 3000
    bridge = LangGraphBridge(CoreClient(url, token_file=token_file), identity="bench")
    forms = ("plain", "decided", "guarded", "plain call", "guarded call")
    times = {name: [] for name in forms}
    run = str(int(time.time() * 1000))
    with SqliteSaver.from_conn_string(os.path.join(work, f"bench-{run}.db")) as saver:
        graphs = {"plain": plain_graph().compile(checkpointer=saver),
                  "decided": bridged_graph(bridge, guarded=False).compile(checkpointer=saver),
                  "guarded": bridged_graph(bridge, guarded=True).compile(checkpointer=saver),
                  "plain call": one_node_graph(plain_call).compile(checkpointer=saver),
                  "guarded call": one_node_graph(guarded_call_node(bridge)).compile(checkpointer=saver)}
        warm = 20
        for i in range(n + warm):
            for name in forms:
                config = {"configurable": {"thread_id": f"{name}-{run}"}}
                t0 = time.perf_counter()
                out = graphs[name].invoke({"n": i}, config, durability="sync")
                elapsed = (time.perf_counter() - t0) * 1000
                if name.startswith("guarded"):
                    assert out["evidence"]["status"] == "executed", out
                if i >= warm:
                    times[name].append(elapsed)

    def added(a, b, p):
        return pct(times[a], p) - pct(times[b], p)

    print(f"runs: {len(times['plain'])} of each form, durability=sync, SqliteSaver")
    for name in forms:
        xs = times[name]
        shape = "call" if name.endswith("call") else "decide -> call"
        print(f"{name:12} {shape:14}  p50 {pct(xs, 50):6.2f} ms   p99 {pct(xs, 99):6.2f} ms"
              f"   mean {statistics.mean(xs):6.2f} ms")
    one_p99 = added("guarded call", "plain call", 99)
    two_p99 = added("guarded", "plain", 99)
    print(f"the bridge adds, as one node (make_guarded_call_node): {added('guarded call', 'plain call', 50):5.2f} ms"
          f" at p50, {one_p99:5.2f} ms at p99  (target: at most {TARGET_MS} ms at p99;"
          f" {pct(times['guarded call'], 99) / pct(times['plain call'], 99):.2f}x the plain call at p99)")
    print(f"the bridge adds, as two nodes (decision, guarded):    {added('guarded', 'plain', 50):5.2f} ms"
          f" at p50, {two_p99:5.2f} ms at p99  (printed only)")
    low, high = p99_interval(times["guarded call"], times["plain call"])
    print(f"  as one node, what it adds at p99 if the runs were drawn again: {low:.2f} to {high:.2f} ms"
          " (95% of 400 bootstrap resamples; printed only)")
    print("  as one node, at p90 / p95 / p99.5:  " + " / ".join(
        f"{added('guarded call', 'plain call', p):.2f}" for p in (90, 95, 99.5)) + " ms (printed only)")
    print(f"  its decision step     {added('decided', 'plain', 50):5.2f} ms at p50, {added('decided', 'plain', 99):5.2f} ms at p99")
    print(f"  its guarded step      {added('guarded', 'decided', 50):5.2f} ms at p50, {added('guarded', 'decided', 99):5.2f} ms at p99")
    print("where it goes (printed only):")
    for name, xs in round_trips(url, token_file, min(n, 1000)).items():
        print(f"  the service's {name:18} round trip  p50 {pct(xs, 50):5.2f} ms   p99 {pct(xs, 99):5.2f} ms")
    instant = without_service(work, min(n, 1000))
    for guarded, plain, what in (("guarded call", "plain call", "one node "), ("guarded", "plain", "two nodes")):
        print(f"  the bridge's {what} with instant answers add {pct(instant[guarded], 50) - pct(instant[plain], 50):5.2f} ms"
              f" at p50, {pct(instant[guarded], 99) - pct(instant[plain], 99):5.2f} ms at p99 (no service)")
    print(json.dumps({"one_node_p99_ms": round(one_p99, 3), "two_nodes_p99_ms": round(two_p99, 3),
                      "decision_step_p99_ms": round(added("decided", "plain", 99), 3),
                      "guarded_step_p99_ms": round(added("guarded", "decided", 99), 3)}))
    if one_p99 > TARGET_MS:
        if os.environ.get("BENCH_HOLD_TARGET") == "0":
            print("(over the target; not held: BL named the bl measured, and the target is for the release build this script builds itself)", file=sys.stderr)
            return
        print("MISSED: what the bridge adds at p99 is over the target", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
