"""bounded-loops' own `bl graph status --json`, over many run directories
in one interpreter (its start-up dominates a single call).

Usage: <bounded-loops venv>/bin/python3 status.py DIR...
Prints one JSON line per directory: {"dir", "exit", "run_state", "stderr"}.
It calls the console entry point the package installs (`bl`) as a black
box: the same arguments, the same output and exit code.
"""
import contextlib
import io
import json
import sys

from bounded_loops.cli import main


def status(directory):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["graph", "status", "--run", directory, "--json"]) or 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    state = None
    if code == 0:
        try:
            state = json.loads(out.getvalue()).get("run_state")
        except ValueError:
            code = -1
    return {"dir": directory, "exit": code, "run_state": state, "stderr": err.getvalue()[-500:]}


for directory in sys.argv[1:]:
    print(json.dumps(status(directory)), flush=True)
