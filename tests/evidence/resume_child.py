"""Resumes a paused thread of the reference app from its SqliteSaver, in a
new process, and prints the final state's evidence."""

import json
import sys

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

import refund_app as app
from bl_evidence import LangGraphBridge

db, thread = sys.argv[1], sys.argv[2]
bridge = LangGraphBridge(app.client(), identity="alice@example.com")
with SqliteSaver.from_conn_string(db) as saver:
    out = app.build(bridge).compile(checkpointer=saver).invoke(
        Command(resume=True), {"configurable": {"thread_id": thread}})
print(json.dumps({"evidence": out["evidence"]}))
