#!/usr/bin/env python3
"""Records the audit-runs corpus with bounded-loops 0.7.6 (a black box).

Usage: record.py BL_CLI [CASE...]  (BL_CLI: bounded-loops' `bl`, from a
throwaway venv). Run from this directory. For each case it runs the
two-auditor graph with `cat` as the auditor CLI (so each audit node's
output is exactly its prompt: the audit result), with the case's audit
plan, then bounded-loops' `graph arena`, and keeps the run (without its
scratch work/ and arena.html) and the arena's audit_coverage.
"""
import json, os, re, shutil, subprocess, sys

A = "sha256:" + "a" * 64
R = "sha256:" + "d" * 64


def plan(cells, assigned=None):
    assigned = [c for c, _ in cells] if assigned is None else assigned
    return {"artifact_digest": A, "rubric_digest": R,
            "mandatory_cells": [{"name": c, "mandatory": m} for c, m in cells],
            "assignments": [{"cell": c, "model_id": "mb", "tool_id": "tx", "version": "1",
                             "rubric_digest": R, "independence": "assessor != producer"} for c in assigned]}


def result(cell, assessor, producer, finding=None):
    return json.dumps({"cell": cell, "assessor": assessor, "producer": producer, "finding": finding})


def finding(fid, severity, disposition):
    return {"finding_id": fid, "severity": severity, "disposition": disposition}


def changed(p, change):
    change(p)
    return p


TWO = plan([("factuality", True), ("style", True)])
ONE = plan([("factuality", True)])
FACT, STYLE = result("factuality", "mb", "ma"), result("style", "mc", "ma")
# case: (review_a's output, review_b's output, the audit plan's text)
CASES = {
    "released": (FACT, result("style", "mc", "ma", finding("F-9", "S2", "open")), TWO),
    "dissent": (FACT, result("factuality", "mc", "ma", finding("F-1", "S3", "open")), ONE),
    "dissent_block": (result("factuality", "mb", "ma", finding("F-1", "S0", "open")),
                      result("factuality", "mc", "ma", finding("F-2", "S1", "open")), ONE),
    "selfonly": (result("factuality", "ma", "ma"), STYLE, TWO),
    "selfplusindep": (result("factuality", "ma", "ma"), result("factuality", "mc", "ma"), ONE),
    "resolved": (result("factuality", "mb", "ma", finding("F-1", "S0", "resolved")),
                 result("style", "mc", "ma", finding("F-1", "S1", "waived")), TWO),
    "malformed": ("not json at all", result("style", "mc", "ma", finding("F-1", "S7", "open")), TWO),
    "malformed2": (json.dumps([1, 2]), json.dumps({"cell": "style", "assessor": "", "producer": "ma", "finding": None}), TWO),
    "malformed3": (json.dumps({"cell": "style", "assessor": "x", "producer": "ma"}),
                   json.dumps({"cell": "style", "assessor": "x", "producer": "ma", "finding": "bad", "extra": 1}), TWO),
    "extra_ok": (json.dumps({"cell": "style", "assessor": "x", "producer": "ma", "finding": None, "extra": 1}),
                 result("unknowncell", "mc", "ma", finding("F-1", "S0", "open")), TWO),
    "nonmand_s0": (FACT, result("opt", "mc", "ma", finding("F-1", "S0", "open")),
                   plan([("factuality", True), ("opt", False)], ["factuality"])),
    "nonmand_self": (FACT, result("opt", "ma", "ma"), plan([("factuality", True), ("opt", False)], ["factuality"])),
    "all_optional": (FACT, result("opt", "mc", "ma"), plan([("factuality", False)], [])),
    "garbage_plan": (FACT, STYLE, "this is not json {"),
    "missing_key": (FACT, STYLE, changed(plan([("factuality", True)]), lambda p: p.pop("assignments"))),
    "unassigned": (FACT, STYLE, plan([("factuality", True), ("style", True)], ["factuality"])),
    "dup_cells": (FACT, STYLE, plan([("factuality", True), ("factuality", True)])),
    "empty_cells": (FACT, STYLE, plan([], [])),
    "bad_digest": (FACT, STYLE, changed(plan([("factuality", True)]), lambda p: p.update(artifact_digest="sha256:ABC"))),
    "bad_assign_digest": (FACT, STYLE, changed(plan([("factuality", True)]), lambda p: p["assignments"][0].update(rubric_digest="x"))),
    "empty_model": (FACT, STYLE, changed(plan([("factuality", True)]), lambda p: p["assignments"][0].update(model_id=""))),
    "empty_indep": (FACT, STYLE, changed(plan([("factuality", True)]), lambda p: p["assignments"][0].update(independence=""))),
    "extra_plan_key": (FACT, STYLE, changed(plan([("factuality", True)]), lambda p: (p.update(plan_id="whatever"), p["assignments"].append(
        {"cell": "ghost", "model_id": "m", "tool_id": "t", "version": "1", "rubric_digest": R, "independence": "i"})))),
    "mandatory_str": (FACT, STYLE, changed(plan([("factuality", True)]), lambda p: p["mandatory_cells"][0].update(mandatory="no"))),
    "dup_finding": (result("factuality", "mb", "ma", finding("F-1", "S1", "open")),
                    result("factuality", "mc", "ma", finding("F-1", "S1", "open")), ONE),
}


def record(bl, case):
    a, b, audit_plan = CASES[case]
    text = audit_plan if isinstance(audit_plan, str) else json.dumps(audit_plan)
    shutil.rmtree(case, ignore_errors=True)
    os.makedirs(case)
    with open(f"{case}/inputs.json", "w") as f:
        json.dump({"draft": "x", "review_a": a, "review_b": b}, f)
    with open(f"{case}/audit-plan.json", "w") as f:
        f.write(text)
    scratch = f"/tmp/audit-runs-{case}"
    shutil.rmtree(scratch, ignore_errors=True)
    subprocess.run([bl, "graph", "run", "--execute", "graph.yaml", "--connections", "connections.json",
                    "--inputs", f"{case}/inputs.json", "--providers", "providers.toml",
                    "--audit-plan", f"{case}/audit-plan.json", "--out", scratch], check=True)
    subprocess.run([bl, "graph", "arena", "--run", scratch], check=True)
    page = open(f"{scratch}/arena.html").read()
    data = json.loads(re.search(r'<script id="arena-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    with open(f"{case}/expected.json", "w") as f:
        json.dump({"audit_coverage": data["audit_coverage"]}, f, indent=1, sort_keys=True, ensure_ascii=False)
    shutil.copytree(scratch, f"{case}/run", ignore=shutil.ignore_patterns("work", "arena.html", "*.lock"))
    shutil.rmtree(scratch)


if __name__ == "__main__":
    for case in sys.argv[2:] or CASES:
        record(sys.argv[1], case)
