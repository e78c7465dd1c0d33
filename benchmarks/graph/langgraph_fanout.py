#!/usr/bin/env python3
"""The benchmark's job as a LangGraph 1.2 StateGraph: N nodes fan out from
START, each runs the agent CLI (`claude -p --output-format json`, the fake
instant one on PATH) as a subprocess with the prompt on stdin, and a
SqliteSaver checkpointer records the run.

usage: langgraph_fanout.py N DB_PATH
"""
import operator
import sqlite3
import subprocess
import sys
from typing import Annotated, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    replies: Annotated[list, operator.add]


def agent_node(name):
    def run(state: State):
        out = subprocess.run(
            ["claude", "-p", "--output-format", "json"],
            input=b"ok",
            capture_output=True,
            check=True,
        )
        return {"replies": [(name, out.stdout)]}

    return run


def main():
    n, db = int(sys.argv[1]), sys.argv[2]
    builder = StateGraph(State)
    for i in range(n):
        name = f"n{i:05d}"
        builder.add_node(name, agent_node(name))
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    conn = sqlite3.connect(db, check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    result = graph.invoke({"replies": []}, {"configurable": {"thread_id": "bench"}})
    assert len(result["replies"]) == n, len(result["replies"])


if __name__ == "__main__":
    main()
