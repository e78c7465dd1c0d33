"""Crash torture: the reference app (a refund a person must approve) is
killed at every step boundary: with each recording sent and its answer
not read, after each answer of the evidence service, and inside the tool
after its effect; then it is run again until it stops.
Across all kills: no effect happens twice, and every run ends approved
and executed once, or in reconciliation_required. Prints a summary."""

import json
import os
import subprocess
import sys

import refund_app as app
from bl_evidence import CoreClient

HERE = os.path.dirname(os.path.abspath(__file__))
work = os.environ["WORK"]
client = CoreClient(os.environ["BL_EVIDENCE_URL"], token_file=os.environ["BL_EVIDENCE_TOKEN_FILE"])


def run_to_the_end(kill_at: str) -> dict:
    thread, order = f"torture-{kill_at}", f"T-{kill_at}"
    db, marker = os.path.join(work, f"{thread}.db"), os.path.join(work, f"{thread}.died")
    runs, killed, last = 0, 0, None
    while runs < 12:
        runs += 1
        child = subprocess.run([sys.executable, os.path.join(HERE, "torture_child.py"), db, thread, order,
                                kill_at, marker], capture_output=True, text=True)
        if child.returncode == -9:
            killed += 1
            continue
        assert child.returncode == 0, (kill_at, child.stderr[-3000:])
        last = json.loads(child.stdout)
        op = last["paused"]
        if op is None:
            break
        if (client.decision(op) or {}).get("stage") == "awaiting_approval":
            reviewed = app.review("approve", op)
            assert reviewed.returncode == 0, reviewed.stderr
    else:
        raise AssertionError(f"kill at {kill_at}: the run did not end in 12 runs")
    evidence = last["evidence"]
    stage = client.decision(evidence["operation_id"])["stage"]
    done = [e for e in app.effects() if e["order"] == order]
    assert len(done) <= 1, f"kill at {kill_at}: {len(done)} effects"
    assert stage in ("executed", "reconciliation_required"), (kill_at, stage)
    if stage == "executed":
        assert len(done) == 1, f"kill at {kill_at}: executed, but {len(done)} effects"
    return {"kill_at": kill_at, "killed": killed, "runs": runs, "stage": stage, "effects": len(done)}


def main() -> None:
    clean = run_to_the_end("never")
    assert clean["stage"] == "executed" and clean["killed"] == 0, clean
    recordings = int(open(os.path.join(work, "torture-never.died.count")).read())
    results = [clean]
    boundaries = [point for n in range(1, recordings + 1) for point in (f"sent-{n}", str(n))] + ["tool"]
    for kill_at in boundaries:
        results.append(run_to_the_end(kill_at))
        assert results[-1]["killed"] == 1, results[-1]
    print(json.dumps({
        "boundaries": len(boundaries),
        "duplicates": sum(max(r["effects"] - 1, 0) for r in results),
        "executed_once": sum(r["stage"] == "executed" for r in results),
        "reconciliation_required": sum(r["stage"] == "reconciliation_required" for r in results),
        "results": results,
    }))


if __name__ == "__main__":
    main()
