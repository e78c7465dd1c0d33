"""Runs the reference app on a SqliteSaver and dies (SIGKILL) inside the
tool, after its effect and before bl is told: the worst place to crash."""

import os
import signal
import sys

from langgraph.checkpoint.sqlite import SqliteSaver

import refund_app as app
from bl_evidence import LangGraphBridge


def effect_then_die(args):
    app.effect(args)
    os.kill(os.getpid(), signal.SIGKILL)


db, order, thread, durability = sys.argv[1:5]
# "one-node": the app whose decision and call are one node.
build = app.build_one_node if sys.argv[5:] == ["one-node"] else app.build
bridge = LangGraphBridge(app.client(), identity="alice@example.com")
with SqliteSaver.from_conn_string(db) as saver:
    graph = build(bridge, tool_fn=effect_then_die).compile(checkpointer=saver)
    graph.invoke({"order": order, "tool": "lookup"}, {"configurable": {"thread_id": thread}}, durability=durability)
