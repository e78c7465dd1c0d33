"""One run of the reference app on a SqliteSaver, as a process the crash
torture kills: it dies (SIGKILL) right after the evidence service answers
its KILL_AT-th recording, or inside the tool after the effect when
KILL_AT is `tool`, once per thread (a marker file says it died). It
starts, resumes or continues the thread as its checkpoint says, and
prints where the run stopped."""

import json
import os
import signal
import sys

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

import refund_app as app
from bl_evidence import CoreClient, LangGraphBridge

db, thread, order, kill_at, marker = sys.argv[1:6]
armed = not os.path.exists(marker)


def die() -> None:
    open(marker, "w").close()
    os.kill(os.getpid(), signal.SIGKILL)


class Killable(CoreClient):
    """Dies at the KILL_AT-th recording: after its answer (`N`), or with the
    request sent and its answer not read (`sent-N`)."""

    def _call(self, method, path, body):
        if method != "POST":
            return super()._call(method, path, body)
        counter = marker + ".count"
        n = (int(open(counter).read()) if os.path.exists(counter) else 0) + 1
        with open(counter, "w") as f:
            f.write(str(n))
        if armed and kill_at == f"sent-{n}":
            self._connect().sendall(self._request(method, path, body))
            die()
        answer = super()._call(method, path, body)
        if armed and kill_at == str(n):
            die()
        return answer


def tool(args):
    result = app.effect(args)
    if armed and kill_at == "tool":
        die()
    return result


client = Killable(os.environ["BL_EVIDENCE_URL"], token_file=os.environ["BL_EVIDENCE_TOKEN_FILE"])
bridge = LangGraphBridge(client, identity="alice@example.com")
config = {"configurable": {"thread_id": thread}}
with SqliteSaver.from_conn_string(db) as saver:
    graph = app.build(bridge, tool_fn=tool).compile(checkpointer=saver)
    state = graph.get_state(config)
    if not state.values:
        out = graph.invoke({"order": order, "tool": "refund", "amount": 12}, config)
    elif any(t.interrupts for t in state.tasks):
        out = graph.invoke(Command(resume=True), config)
    else:
        out = graph.invoke(None, config)
print(json.dumps({"paused": app.pending_operation(out), "evidence": out.get("evidence")}))
