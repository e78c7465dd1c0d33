#!/usr/bin/env python3
"""Record one bounded-loops graph-run case as a black box.

usage: record.py CASE_SPEC.py  (the spec module defines CASES: list of dicts)
"""
import json, os, re, shutil, subprocess, sys, copy

# Override with env vars: BLREC_OUT (where case dirs are written), BLREC_FAKE_BIN
# (a directory holding fake_agent.py + claude/codex/grok/muse/agy symlinks),
# BLREC_VENV_BIN (the bin/ of a venv with bounded-loops==0.7.6 installed).
ROOT = os.environ.get("BLREC_OUT", "/tmp/blrec/cases")
TPL = os.environ.get("BLREC_FAKE_BIN", "/tmp/blrec/tpl/fake-bin")
VENV_BIN = os.environ.get("BLREC_VENV_BIN", "/tmp/blrec/venv/bin")

CONN_TEMPLATE = {
    "binding_id": None, "slot_id": None, "connector_id": "local_cli",
    "connector_version": "1.0.0", "connection_id": None,
    "admission_digest": "sha256:" + "1" * 64,
    "route_policy_digest": "sha256:" + "2" * 64,
    "provider_id": "claude", "model_target": "fake-model", "region": "local",
    "fallback": False, "capabilities": ["chat"], "data_class_max": "internal",
    "allowed_effects": ["read_only", "workspace_write"],
    "isolation": "workspace_only", "transport": "local_cli", "admitted": True,
}


def build(spec):
    """spec: nodes [{id, kind?, max_attempts?, on_failure?, mode?, slot?...}], edges [(a,b,when)]"""
    nodes, slots, conns = [], [], []
    parents = {}
    for e in spec["edges"]:
        parents.setdefault(e[1], []).append(e[0])
    children = {e[0] for e in spec["edges"]}
    for n in spec["nodes"]:
        nid = n["id"]
        kind = n.get("kind", "research_claim")
        node = {
            "id": nid, "kind": kind,
            "inputs": {"in_" + p.replace("-", "_"): "text" for p in parents.get(nid, [])},
            "outputs": {"out": "text"},
            "budget": {"max_attempts": n.get("max_attempts", 1), "max_wallclock_s": n.get("max_wallclock_s", 60)},
            "effects": n.get("effects", ["read_only"]),
            "isolation": "workspace_only",
        }
        if "budget_extra" in n:
            node["budget"].update(n["budget_extra"])
        if kind == "join":
            node["mode"] = n.get("mode", "all_selected")
        if kind == "approval":
            node["required_role"] = n.get("required_role", "editor")
        if kind == "publish":
            if "publication_policy" in n:
                node["publication_policy"] = n["publication_policy"]
        if n.get("on_failure") is not None:
            node["on_failure"] = n["on_failure"]
        slot = n.get("slot", "auto" if kind not in ("join", "approval") else None)
        if slot == "auto":
            slot = "slot-" + nid
        if slot:
            node["connection_slot"] = slot
            if slot not in [s["id"] for s in slots]:
                slots.append({"id": slot, "requires": ["chat"], "data_class_max": "internal"})
                c = dict(CONN_TEMPLATE)
                c.update({"binding_id": "bind-" + slot, "slot_id": slot, "connection_id": "conn-" + slot,
                          "provider_id": n.get("provider", "claude")})
                c.update(n.get("conn_extra", {}))
                conns.append(c)
        nodes.append(node)
    edges = []
    for e in spec["edges"]:
        a, b = e[0], e[1]
        ed = {"from_node": a, "from_port": "out", "to_node": b, "to_port": "in_" + a.replace("-", "_")}
        if len(e) > 2 and e[2] is not None:
            ed["when"] = e[2]
        edges.append(ed)
    pol = {"data_class": "internal", "fail_mode": spec.get("fail_mode", "fail_closed")}
    if spec.get("repair_budget"):
        pol["repair_budget"] = spec["repair_budget"]
    man = {"api_version": "bounded-loops.dev/graph/v1", "graph_id": spec["name"].replace("_", "-")[:60],
           "version": "1.0.0", "nodes": nodes, "edges": edges, "connection_slots": slots, "policies": pol}
    return man, conns


def norm(s, case_dir):
    s = s.replace(case_dir + "/", "").replace(case_dir, ".")
    s = re.sub(r"(work/graph-run/[a-z0-9_-]+?)-[0-9a-f]{32}", r"\1-<RAND>", s)
    s = s.replace(VENV_BIN + "/", "")
    return s


def events(path):
    out = []
    if not os.path.exists(path):
        return None
    for line in open(path):
        e = json.loads(line)
        out.append({"seq": e["sequence"], "type": e["event_type"],
                    "node": e["payload"].get("node_id"), "key": e["idempotency_key"].split(":", 1)[1],
                    "payload": e["payload"]})
    return out


def record(spec):
    name = spec["name"]
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shutil.copytree(TPL, os.path.join(d, "fake-bin"), symlinks=True)
    for cli in spec.get("remove_clis", []):
        os.unlink(os.path.join(d, "fake-bin", cli))
    if "manifest_raw" in spec:
        man = spec["manifest_raw"]; conns = spec["connections_raw"]
    else:
        man, conns = build(spec)
        if "patch" in spec:
            spec["patch"](man, conns)
    mname = "manifest.json"
    with open(os.path.join(d, mname), "w") as f:
        json.dump(man, f, indent=2); f.write("\n")
    with open(os.path.join(d, "connections.json"), "w") as f:
        json.dump(conns, f, indent=2); f.write("\n")
    if spec.get("envelope"):
        os.makedirs(os.path.join(d, "state"))
        open(os.path.join(d, "state", "envelope"), "w").write(spec["envelope"])
    for fn, obj in spec.get("inputs_files", {"inputs.json": spec.get("inputs", {})}).items():
        with open(os.path.join(d, fn), "w") as f:
            json.dump(obj, f, indent=2); f.write("\n")
    cmds = spec.get("commands") or [
        "bl graph run --execute manifest.json --connections connections.json --inputs inputs.json --out run-dir",
        "bl graph status --run run-dir --json"]
    env = dict(os.environ)
    env["PATH"] = os.path.join(d, "fake-bin") + ":" + VENV_BIN + ":/usr/local/bin:/usr/bin:/bin"
    env.pop("BOUNDED_LOOPS_EGRESS_POSTURE", None)
    results = []
    with open(os.path.join(d, "commands.sh"), "w") as f:
        f.write("#!/bin/sh\n# Run from this directory. bl = bounded-loops 0.7.6 CLI; fake agent CLIs first on PATH.\n"
                "# Exit codes are recorded in expected.json; do not stop on non-zero.\n"
                "export PATH=\"$PWD/fake-bin:$PATH\"\nrm -rf run-dir state/calls.jsonl state/flaky-*\n")
        for c in cmds:
            f.write(c + "\n")
    os.chmod(os.path.join(d, "commands.sh"), 0o755)
    for c in cmds:
        p = subprocess.run(["bash", "-c", c], cwd=d, env=env, capture_output=True, text=True,
                           timeout=spec.get("timeout", 120))
        r = {"command": c, "exit_code": p.returncode,
             "stdout": norm(p.stdout, d), "stderr": norm(p.stderr, d)}
        if "--json" in c.split() and p.stdout.strip().startswith("{"):
            try:
                r["stdout_json"] = json.loads(p.stdout)
            except Exception:
                pass
        results.append(r)
        if spec.get("after_each"):
            spec["after_each"](d, c, results)
    rd = os.path.join(d, "run-dir")
    exp = {"case": name, "description": spec.get("description", ""), "commands": results}
    ev = events(os.path.join(rd, "controller-events.jsonl"))
    if ev is not None:
        exp["events"] = ev
        st = subprocess.run([VENV_BIN + "/bl", "graph", "status", "--run", "run-dir", "--json"], cwd=d, env=env,
                            capture_output=True, text=True)
        try:
            sj = json.loads(st.stdout)
            exp["final"] = {"run_state": sj["run_state"],
                            "nodes": {n["node_id"]: {"state": n["state"], "attempt": n["attempt"],
                                                     "gate_passed": n["gate_passed"]} for n in sj["nodes"]}}
        except Exception:
            exp["final"] = {"status_error": st.stderr}
        os.makedirs(os.path.join(d, "run"), exist_ok=True)
        for fn in ("controller-events.jsonl", "run-meta.json", "approvals.json", "published-effects.json"):
            if os.path.exists(os.path.join(rd, fn)):
                shutil.copy(os.path.join(rd, fn), os.path.join(d, "run", fn))
    objs = os.path.join(rd, "artifacts", "objects")
    if os.path.isdir(objs):
        arts = {}
        for fn in sorted(os.listdir(objs)):
            b = open(os.path.join(objs, fn), "rb").read()
            try:
                arts["sha256:" + fn] = b.decode("utf-8")[:2000]
            except UnicodeDecodeError:
                arts["sha256:" + fn] = "<binary %d bytes>" % len(b)
        exp["artifacts"] = arts
    calls = os.path.join(d, "state", "calls.jsonl")
    if os.path.exists(calls):
        exp["agent_calls"] = [json.loads(norm(l, d)) for l in open(calls)]
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f, indent=2, ensure_ascii=False); f.write("\n")
    return exp


def summary(exp):
    print("=== %s" % exp["case"])
    for r in exp["commands"]:
        print("  $ %s -> %d" % (r["command"][:110], r["exit_code"]))
        if r["exit_code"] != 0 or "status" not in r["command"]:
            for l in (r["stdout"] + r["stderr"]).splitlines()[:14]:
                print("     | " + l[:220])
    for e in exp.get("events", []):
        pl = {k: v for k, v in e["payload"].items() if k not in ("node_id", "artifact_digests", "route", "transport")}
        print("   %3d %-24s %-8s %s" % (e["seq"], e["type"], e["node"] or "", json.dumps(pl)[:230]))
    if "final" in exp:
        print("  FINAL", json.dumps(exp["final"]))


if __name__ == "__main__":
    ns = {}
    exec(open(sys.argv[1]).read(), ns)
    only = sys.argv[2:]
    for spec in ns["CASES"]:
        if only and spec["name"] not in only:
            continue
        summary(record(spec))
