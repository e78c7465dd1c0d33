#!/usr/bin/env python3
"""Record how bounded-loops 0.7.6's MCP server (`bounded-loops-mcp`) behaves.

Our own recorder; it contains no bounded-loops code. It drives the upstream server over stdio
with the `mcp` client package and writes what came back.

Needs a Python venv with `bounded-loops[mcp]==0.7.6` and `mcp==2.3.0` installed (the venv's
python must run this script, because it imports `mcp`):

    python3 -m venv /tmp/upmcp
    /tmp/upmcp/bin/pip install 'bounded-loops[mcp]==0.7.6' 'mcp==2.3.0'
    /tmp/upmcp/bin/python tests/corpus/mcp/record_behaviour.py

Environment knobs:
    UPMCP_VENV   venv holding the server (default: the venv of the running python)
    UPMCP_WORK   scratch workspace (default /tmp/upmcp-work; wiped and rebuilt)
    UPMCP_EMPTY  scratch dir with nothing in it (default /tmp/upmcp-empty; wiped)
    UPMCP_OUT    output prefix (default /tmp/upmcp-record): writes <prefix>.json (full,
                 untruncated) and <prefix>.md (truncated, per tool)

The scratch workspace is built from this repository (read-only use):
  * examples/loops/{config-contract,order-schema,...} copied to <work>/loops/, plus a broken
    loop (`loops/broken-loop`, rung L9) for error cases;
  * examples/graphs/first-graph/ copied to <work>/inputs/, and saved as
    <work>/.bounded-loops/graphs/first-graph.yaml (verbatim) and first-graph-plain.yaml
    (same, with the `extensions:` line removed, which upstream 0.7.6 does not accept);
  * tests/corpus/graph-runs/{approval_approved,chain_succeeds,token_budget_pause_resume,
    fail_closed_stops} copied to <work>/cases-*/ (their fake-bin symlink to _recorder is
    replaced by a copy), and run with the upstream CLI `bl graph run --execute ... --out
    .bounded-loops/runs/<name>` to produce runs the MCP tools can address by name;
  * three manifests derived from approval_approved (see DERIVED / derived_manifests) whose
    approval or budget pause is followed by a slot-less publish node, because the MCP
    approve/resume tools cannot supply prompts for connector nodes;
  * `.bounded-loops/graphs/demo.yaml` (DEMO) for graph_interview / graph_configure.

UPMCP_TRUST (default /tmp/upmcp-trust/trust.json) is passed as BOUNDED_LOOPS_TRUST_STORE so that
bl_run(confirm=true) does not write a trust entry into the real home directory.
tests/corpus/mcp/upstream-behaviour.md is hand-written sections 1-3 followed by <UPMCP_OUT>.md.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[3]
VENV = Path(os.environ.get("UPMCP_VENV", Path(sys.executable).parent.parent))
WORK = Path(os.environ.get("UPMCP_WORK", "/tmp/upmcp-work"))
EMPTY = Path(os.environ.get("UPMCP_EMPTY", "/tmp/upmcp-empty"))
OUT = Path(os.environ.get("UPMCP_OUT", "/tmp/upmcp-record"))
# In a directory of its own: bounded-loops makes the trust store's
# directory private (mode 0700), which must never be /tmp itself.
TRUST = Path(os.environ.get("UPMCP_TRUST", "/tmp/upmcp-trust/trust.json"))
SERVER = VENV / "bin" / "bounded-loops-mcp"
BL = VENV / "bin" / "bl"
LOOPS = ["config-contract", "order-schema", "readme-sections", "records-shell", "tests-green"]
CASES = {
    # case dir                  run name(s)                          extra CLI args
    "approval_approved": (["appr-ship", "appr-bad"], []),
    "chain_succeeds": (["chain-ok"], []),
    "token_budget_pause_resume": (["budget-paused"], ["--max-tokens", "15"]),
    "fail_closed_stops": (["failed-run"], []),
}
# Derived from approval_approved (same fake agent, same connections minus slot-ship), built in
# setup(): the MCP approve/resume tools cannot supply prompts, so a run they can carry to the
# end must have no connector node left after the pause.
DERIVED = {
    # name            manifest builder key   run names                                        extra
    "appr_publish": ("appr_publish", ["appr-pub-approve", "appr-pub-reject", "appr-pub-resume"], []),
    "appr_external": ("appr_external", ["appr-ext"], []),
    "budget_publish": ("budget_publish", ["budget-pub", "budget-pub-2"], ["--max-tokens", "15"]),
}

# A graph with no connection slot: the only kind graph_plan/graph_run can compile without
# connections (draft -> approval -> publish).
MINI = """api_version: bounded-loops.dev/graph/v1
graph_id: mini
version: 1.0.0
connection_slots: []
nodes:
- {id: a, kind: research_claim, inputs: {}, outputs: {out: text}, effects: [], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 300}}
- {id: ok, kind: approval, required_role: reviewer, inputs: {in: text}, outputs: {out: text}, effects: [read_only], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 300}}
- {id: pub, kind: publish, publication_policy: outbox, inputs: {in: text}, outputs: {}, effects: [workspace_write], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 60}}
edges:
- {from_node: a, from_port: out, to_node: ok, to_port: in}
- {from_node: ok, from_port: out, to_node: pub, to_port: in}
policies: {data_class: internal, fail_mode: fail_closed}
"""

# Saved as .bounded-loops/graphs/demo.yaml: lints once the interview's answers are applied
# (approval has no required_role; policies is empty).
DEMO = """api_version: bounded-loops.dev/graph/v1
graph_id: demo
version: 1.0.0
connection_slots:
- {id: writer, requires: [research], data_class_max: internal}
nodes:
- {id: a, kind: research_claim, connection_slot: writer, inputs: {}, outputs: {out: text}, effects: [workspace_write], isolation: workspace_only, budget: {max_attempts: 2, max_wallclock_s: 300}}
- {id: ok, kind: approval, inputs: {in: text}, outputs: {out: text}, effects: [read_only], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 300}}
- {id: pub, kind: publish, publication_policy: outbox, inputs: {in: text}, outputs: {}, effects: [workspace_write], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 60}}
edges:
- {from_node: a, from_port: out, to_node: ok, to_port: in}
- {from_node: ok, from_port: out, to_node: pub, to_port: in}
policies: {}
"""

# Leaves most fields out, so the interview has questions of every weight.
SPARSE = """api_version: bounded-loops.dev/graph/v1
graph_id: sparse
version: 1.0.0
nodes:
- {id: a, kind: research_claim, connection_slot: writer}
- {id: ok, kind: approval}
"""


def derived_manifests(src: dict) -> dict:
    """Manifests built from the approval_approved case's manifest."""
    draft, gate = src["nodes"][0], src["nodes"][1]
    slots = [s for s in src["connection_slots"] if s["id"] != "slot-ship"]

    def publish(port, effects):
        return {"id": "pub", "kind": "publish", "inputs": {port: "text"}, "outputs": {"out": "text"},
                "budget": {"max_attempts": 1, "max_wallclock_s": 60}, "effects": effects,
                "isolation": "workspace_only", "publication_policy": "local-ledger"}

    def graph(gid, nodes, edges):
        return {"api_version": src["api_version"], "graph_id": gid, "version": "1.0.0", "nodes": nodes,
                "edges": edges, "connection_slots": slots, "policies": src["policies"]}

    e1 = {"from_node": "draft", "from_port": "out", "to_node": "gate", "to_port": "in_draft"}
    e2 = {"from_node": "gate", "from_port": "out", "to_node": "pub", "to_port": "in_gate"}
    return {
        "appr_publish": graph("approval-then-publish", [draft, gate, publish("in_gate", ["workspace_write"])], [e1, e2]),
        "appr_external": graph("approval-then-external", [draft, gate, publish("in_gate", ["external_write"])], [e1, e2]),
        "budget_publish": graph("budget-then-publish", [draft, publish("in_draft", ["workspace_write"])],
                                [{"from_node": "draft", "from_port": "out", "to_node": "pub", "to_port": "in_draft"}]),
    }


# ── setup ────────────────────────────────────────────────────────────────────


def setup() -> dict:
    for d in (WORK, EMPTY):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    (WORK / "pyproject.toml").write_text('[project]\nname = "upmcp-scratch"\nversion = "0.0.0"\n')
    (WORK / "loops").mkdir()
    for name in LOOPS:
        shutil.copytree(REPO / "examples/loops" / name, WORK / "loops" / name)
    (WORK / "loops/broken-loop").mkdir()
    (WORK / "loops/broken-loop/loop.yaml").write_text("name: broken-loop\nrung: L9\n")
    (WORK / "catalog").mkdir()
    (WORK / "catalog/README.md").write_text("# Scratch catalog\n\nA placeholder written by the recorder.\n")
    shutil.copytree(REPO / "examples/graphs/first-graph", WORK / "inputs")
    graphs = WORK / ".bounded-loops/graphs"
    graphs.mkdir(parents=True)
    (WORK / ".bounded-loops/runs").mkdir()
    first = (WORK / "inputs/graph.yaml").read_text()
    (graphs / "first-graph.yaml").write_text(first)
    (graphs / "first-graph-plain.yaml").write_text(strip_extensions(first))
    (graphs / "demo.yaml").write_text(DEMO)
    cli_log = []
    for case, (runs, extra) in CASES.items():
        dst = WORK / f"cases-{case}"
        shutil.copytree(REPO / "tests/corpus/graph-runs" / case, dst, symlinks=True)
        shutil.rmtree(dst / "run", ignore_errors=True)
        fake = dst / "fake-bin/fake_agent.py"
        fake.unlink()
        shutil.copy(REPO / "tests/corpus/graph-runs/_recorder/fake_agent.py", fake)
        fake.chmod(0o755)
        for run in runs:
            cmd = [str(BL), "graph", "run", "--execute", f"{dst}/manifest.json",
                   "--connections", f"{dst}/connections.json", "--inputs", f"{dst}/inputs.json",
                   "--out", f".bounded-loops/runs/{run}", *extra]
            p = subprocess.run(cmd, cwd=WORK, env=env_for(dst), capture_output=True, text=True)
            cli_log.append({"run": run, "case": case, "exit": p.returncode,
                            "stdout_tail": p.stdout[-400:], "stderr": p.stderr[-400:]})
    base = WORK / "cases-approval_approved"
    derived = WORK / "cases-derived"
    derived.mkdir()
    built = derived_manifests(json.loads((base / "manifest.json").read_text()))
    conns = [c for c in json.loads((base / "connections.json").read_text()) if c["slot_id"] != "slot-ship"]
    (derived / "connections.json").write_text(json.dumps(conns, indent=1))
    (derived / "inputs.json").write_text(json.dumps({"draft": "ok"}))
    for key, doc in built.items():
        (derived / f"{key}.json").write_text(json.dumps(doc, indent=1))
    for case, (key, runs, extra) in DERIVED.items():
        for run in runs:
            cmd = [str(BL), "graph", "run", "--execute", f"{derived}/{key}.json",
                   "--connections", f"{derived}/connections.json", "--inputs", f"{derived}/inputs.json",
                   "--out", f".bounded-loops/runs/{run}", *extra]
            p = subprocess.run(cmd, cwd=WORK, env=env_for(base), capture_output=True, text=True)
            cli_log.append({"run": run, "case": case, "exit": p.returncode,
                            "stdout_tail": p.stdout[-400:], "stderr": p.stderr[-400:]})
    return {"cli": cli_log}


def strip_extensions(text: str) -> str:
    return "".join(line for line in text.splitlines(True) if not line.startswith("extensions:"))


def upstream_ports(text: str) -> str:
    """first-graph with its artifact-port outputs/inputs rewritten to upstream's `port: type`."""
    import re
    text = re.sub(r"(\w+): \{type: (\w+), path: [^}]*\}", r"\1: \2", text)
    return re.sub(r"(\w+): \{type: (\w+)\}", r"\1: \2", text)


def env_for(case_dir: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{case_dir}/fake-bin:{VENV}/bin:" + env.get("PATH", "")
    env.pop("BOUNDED_LOOPS_WORKSPACE", None)
    env["BOUNDED_LOOPS_TRUST_STORE"] = str(TRUST)
    return env


def snapshot(root: Path) -> dict:
    out = {}
    for base in (root / ".bounded-loops", root / "catalog", root / "loops"):
        if not base.exists():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_file():
                data = p.read_bytes()
                out[str(p.relative_to(root))] = (hashlib.sha256(data).hexdigest()[:12], data.count(b"\n"))
    return out


#: Small run files whose whole content is worth showing when a call writes them.
SHOW_CONTENT = ("approvals.json", "published-effects.json")


def diff(before: dict, after: dict, root: Path) -> dict | None:
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(after) & set(before) if after[k][0] != before[k][0])
    if not (added or removed or changed):
        return None
    d = {"added": added, "removed": removed, "changed": changed}
    appended = {}
    for rel in changed + added:
        if rel.endswith("controller-events.jsonl"):
            skip = before.get(rel, (None, 0))[1]
            lines = (root / rel).read_text().splitlines()[skip:]
            appended[rel] = [{"event_type": json.loads(l).get("event_type"),
                              "actor": json.loads(l).get("actor"),
                              "payload": json.loads(l).get("payload")} for l in lines]
        if rel.endswith(SHOW_CONTENT):
            d.setdefault("contents", {})[rel] = json.loads((root / rel).read_text())
    if appended:
        d["events_appended"] = appended
    return d


# ── recording ────────────────────────────────────────────────────────────────


def content_record(content) -> list:
    out = []
    for c in content or []:
        item = {"type": c.type}
        if c.type == "text":
            item["text"] = c.text
        else:
            item["raw"] = c.model_dump(mode="json", exclude_none=True)
        out.append(item)
    return out


def rpc_error(exc: Exception) -> str:
    code = getattr(exc, "code", None)
    return f"{type(exc).__name__} code={code}: {getattr(exc, 'message', exc)}"


class Recorder:
    def __init__(self, session: ClientSession, label: str, root: Path):
        self.s, self.label, self.root = session, label, root
        self.calls: list[dict] = []

    async def tool(self, name: str, args: dict | None, note: str = "") -> dict:
        before = snapshot(self.root)
        rec = {"session": self.label, "kind": "tool", "tool": name, "arguments": args, "note": note}
        try:
            r = await self.s.call_tool(name, args)
            rec["isError"] = bool(r.is_error)
            rec["content"] = content_record(r.content)
            rec["structuredContent"] = r.structured_content
        except Exception as exc:  # JSON-RPC level error
            rec["rpc_error"] = rpc_error(exc)
        rec["fs_changes"] = diff(before, snapshot(self.root), self.root)
        self.calls.append(rec)
        return rec

    async def resource(self, uri: str, note: str = "") -> dict:
        rec = {"session": self.label, "kind": "resource", "uri": uri, "note": note}
        try:
            r = await self.s.read_resource(uri)
            rec["contents"] = [c.model_dump(mode="json", exclude_none=True) for c in r.contents]
        except Exception as exc:
            rec["rpc_error"] = rpc_error(exc)
        self.calls.append(rec)
        return rec

    async def prompt(self, name: str, args: dict | None, note: str = "") -> dict:
        rec = {"session": self.label, "kind": "prompt", "prompt": name, "arguments": args, "note": note}
        try:
            r = await self.s.get_prompt(name, args)
            rec["result"] = r.model_dump(mode="json", exclude_none=True)
        except Exception as exc:
            rec["rpc_error"] = rpc_error(exc)
        self.calls.append(rec)
        return rec


def token_of(rec: dict) -> str | None:
    sc = rec.get("structuredContent") or json.loads(rec["content"][0]["text"])
    return sc.get("confirm_token")


async def session(cwd: Path, env: dict, label: str, body) -> tuple[dict, list]:
    params = StdioServerParameters(command=str(SERVER), args=[], env=env, cwd=str(cwd))
    with open(OUT.with_suffix(f".{label}.stderr"), "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                rec = Recorder(s, label, cwd)
                meta = {"initialize": init.model_dump(mode="json", exclude_none=True)}
                await body(s, rec, meta)
                return meta, rec.calls


async def body_main(s: ClientSession, r: Recorder, meta: dict) -> None:
    tools = await s.list_tools()
    meta["tools"] = [
        {"name": t.name, "has_outputSchema": t.output_schema is not None,
         "outputSchema": t.output_schema, "annotations": t.annotations.model_dump(exclude_none=True)
         if t.annotations else None, "description_head": (t.description or "")[:120]}
        for t in tools.tools
    ]
    meta["resources"] = [x.model_dump(mode="json", exclude_none=True) for x in (await s.list_resources()).resources]
    meta["resource_templates"] = [
        x.model_dump(mode="json", exclude_none=True)
        for x in (await s.list_resource_templates()).resource_templates
    ]
    meta["prompts"] = [x.model_dump(mode="json", exclude_none=True) for x in (await s.list_prompts()).prompts]

    first = (WORK / "inputs/graph.yaml").read_text()
    plain = strip_extensions(first)
    upstream_first = upstream_ports(plain)

    # raw text formatting of a tool result, once
    raw = await s.call_tool("graph_interview", {})
    meta["raw_text_example"] = raw.content[0].text

    # graph_lint / graph_plan
    await r.tool("graph_lint", {"manifest_yaml": upstream_first}, "first-graph in upstream's port syntax")
    await r.tool("graph_plan", {"manifest_yaml": first}, "first-graph verbatim")
    await r.tool("graph_plan", {"manifest_yaml": plain}, "first-graph without `extensions:`")
    await r.tool("graph_plan", {"manifest_yaml": upstream_first}, "first-graph in upstream's port syntax (lints; has connection slots)")
    await r.tool("graph_plan", {"manifest_yaml": MINI}, "graph without connection slots: draft -> approval -> publish")
    await r.tool("graph_plan", {"manifest_yaml": "nodes: [unclosed"}, "bad: unparseable YAML")
    await r.tool("graph_plan", {"manifest_yaml": "- just\n- a list\n"}, "bad: not a mapping")
    await r.tool("graph_plan", {}, "bad: required argument missing")
    await r.tool("graph_plan", {"manifest_yaml": 42}, "bad: wrong argument type")

    # graph_run (preview only)
    await r.tool("graph_run", {"manifest_yaml": MINI}, "graph without connection slots")
    await r.tool("graph_run", {"manifest_yaml": upstream_first}, "first-graph in upstream's port syntax")
    await r.tool("graph_run", {"manifest_yaml": MINI, "confirm": True, "execute": True}, "extra arguments `confirm`, `execute`")

    # graph_compose
    await r.tool("graph_compose", {"graph_id": "demo", "nodes": [{"id": "a", "kind": "research_claim"}]},
                 "minimal: one node, nothing else")
    await r.tool("graph_compose", {
        "graph_id": "demo2",
        "nodes": [{"id": "draft", "kind": "research_claim", "connection_slot": "w",
                   "outputs": {"out": "text"}},
                  {"id": "check", "kind": "loop"},
                  {"id": "ok", "kind": "approval", "inputs": {"in": "text"}, "required_role": "reviewer"}],
        "edges": [{"from_node": "draft", "from_port": "out", "to_node": "ok", "to_port": "in"}],
        "connection_slots": [{"id": "w", "requires": ["research"], "data_class_max": "internal"}],
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"},
        "version": "2.0.0",
    }, "three nodes incl. a loop node with no loop_package, an edge, a slot, policies, version")
    cat = await s.call_tool("bl_catalog", {"gate_kind": "jsonschema"})
    digest = next((l.get("loop_package") for l in json.loads(cat.content[0].text)["loops"] if l.get("loop_package")), None)
    await r.tool("graph_compose", {"graph_id": "loopy", "nodes": [{"id": "l", "kind": "loop", "loop_package": digest}]},
                 "loop node with the loop_package bl_catalog reports for a workspace loop")
    await r.tool("graph_compose", {"graph_id": "bad", "nodes": [{"id": "a", "kind": "spaceship"}]},
                 "bad: unknown node kind")
    await r.tool("graph_compose", {"graph_id": "bad", "nodes": [{"kind": "research_claim"}]},
                 "bad: node without id")
    await r.tool("graph_compose", {"graph_id": "bad", "nodes": [{"id": "a", "kind": "research_claim"}],
                                   "edges": [{"from_node": "a", "from_port": "out", "to_node": "zz", "to_port": "in"}]},
                 "bad: edge to a node that does not exist")
    await r.tool("graph_compose", {"graph_id": "x"}, "bad: required `nodes` missing")

    # graph_interview
    await r.tool("graph_interview", {}, "no arguments")
    await r.tool("graph_interview", {"manifest_yaml": first}, "manifest_yaml = first-graph verbatim (every field stated)")
    await r.tool("graph_interview", {"manifest_yaml": SPARSE}, "manifest_yaml with most fields left out")
    await r.tool("graph_interview", {"name": "demo"}, "name of a saved graph (.bounded-loops/graphs/demo.yaml)")
    await r.tool("graph_interview", {"name": "demo", "manifest_yaml": SPARSE}, "both name and manifest_yaml given")
    await r.tool("graph_interview", {"name": "no-such-graph"}, "bad: unknown saved graph")
    await r.tool("graph_interview", {"name": "../etc/passwd"}, "bad: path as name")
    await r.tool("graph_interview", {"manifest_yaml": "a: [b"}, "bad: unparseable YAML")

    # graph_configure
    answers = [{"pointer": "/nodes/1/required_role", "value": "reviewer"},
               {"pointer": "/policies/data_class", "value": "internal"},
               {"pointer": "/policies/fail_mode", "value": "fail_closed"}]
    await r.tool("graph_configure", {"name": "demo", "changes": answers}, "answers to the interview's pointers; confirm omitted")
    await r.tool("graph_configure", {"name": "demo", "changes": answers, "confirm": True}, "same, confirm true")
    await r.tool("graph_configure", {"name": "demo", "changes": [{"pointer": "/nodes/0/isolation", "value": "bogus"}], "confirm": True},
                 "bad: value the compiler refuses")
    await r.tool("graph_configure", {"name": "demo", "changes": [{"pointer": "/nodes/9/isolation", "value": "workspace_only"}]},
                 "bad: pointer past the end of a list")
    await r.tool("graph_configure", {"name": "demo", "changes": [{"pointer": "/nodes/0/nope/x", "value": 1}]},
                 "bad: pointer through a missing key")
    await r.tool("graph_configure", {"name": "demo", "changes": [{"pointer": "/nodes/0/new_field", "value": 1}]},
                 "pointer to a new key on an existing mapping")
    await r.tool("graph_configure", {"name": "demo", "changes": [{"value": 1}]}, "bad: change without pointer")
    await r.tool("graph_configure", {"name": "demo", "changes": [{"pointer": "nodes/0/isolation", "value": "x"}]},
                 "bad: pointer without leading /")
    await r.tool("graph_configure", {"name": "demo", "changes": []}, "empty change list")
    await r.tool("graph_configure", {"name": "no-such-graph", "changes": answers}, "bad: unknown saved graph")
    await r.tool("graph_configure", {"name": "a/b", "changes": answers}, "bad: name with a slash")
    await r.tool("graph_configure", {"name": "demo"}, "bad: changes missing")

    # graph_runs / graph_status (context for the run tools)
    await r.tool("graph_runs", {}, "workspace with runs")
    await r.tool("graph_status", {"run": "appr-pub-approve"}, "run paused at approval node `gate` (before approve)")
    await r.tool("graph_status", {"run": "no-such-run"}, "bad: unknown run")

    # graph_approve
    A = {"run": "appr-pub-approve", "node_id": "gate", "decision": "approved"}
    await r.tool("graph_approve", A, "draft -> gate -> publish(workspace_write); confirm omitted (defaults false)")
    await r.tool("graph_approve", {**A, "confirm": True}, "confirm true")
    await r.tool("graph_approve", {**A, "confirm": True}, "again, on the now finished run")
    await r.tool("graph_approve", {**A, "decision": "rejected", "confirm": True}, "reject after it was approved")
    await r.tool("graph_approve", {"run": "appr-pub-reject", "node_id": "gate", "decision": "rejected"}, "reject preview")
    await r.tool("graph_approve", {"run": "appr-pub-reject", "node_id": "gate", "decision": "rejected", "confirm": True}, "reject")
    await r.tool("graph_approve", {"run": "appr-ext", "node_id": "gate", "decision": "approved"}, "preview; downstream publish declares external_write")
    await r.tool("graph_approve", {"run": "appr-ship", "node_id": "gate", "decision": "approved", "confirm": True},
                 "corpus approval_approved: downstream node is a connector node")
    await r.tool("graph_approve", {"run": "appr-bad", "node_id": "gate", "decision": "maybe"}, "bad: decision not approved/rejected")
    await r.tool("graph_approve", {"run": "appr-bad", "node_id": "", "decision": "approved"}, "bad: empty node_id")
    await r.tool("graph_approve", {"run": "appr-bad", "node_id": "draft", "decision": "approved"}, "non-approval node, preview")
    await r.tool("graph_approve", {"run": "appr-pub-resume", "node_id": "draft", "decision": "approved", "confirm": True}, "non-approval node, confirm")
    await r.tool("graph_approve", {"run": "appr-pub-resume", "node_id": "nope", "decision": "approved", "confirm": True}, "unknown node, confirm")
    await r.tool("graph_approve", {"run": "no-such-run", "node_id": "gate", "decision": "approved"}, "bad: unknown run")
    await r.tool("graph_approve", {"run": "../../etc", "node_id": "gate", "decision": "approved"}, "bad: path traversal as run")
    await r.tool("graph_approve", {"run": str(WORK / ".bounded-loops/runs/appr-bad"), "node_id": "gate", "decision": "approved"}, "bad: absolute path as run")
    await r.tool("graph_approve", {"run": "graph-run", "node_id": "gate", "decision": "approved"}, "bad: the run's run_id instead of its directory name")
    await r.tool("graph_approve", {"run": "appr-bad", "node_id": "gate"}, "bad: decision missing")

    # graph_resume
    await r.tool("graph_resume", {"run": "budget-pub"}, "draft -> publish, paused on its token ceiling; confirm omitted")
    await r.tool("graph_resume", {"run": "budget-pub", "confirm": True}, "confirm true, no new ceiling")
    await r.tool("graph_resume", {"run": "budget-pub", "confirm": True, "max_tokens": 1000}, "confirm true, max_tokens 1000")
    await r.tool("graph_resume", {"run": "budget-pub-2", "confirm": True, "max_cost_usd": "1.50"}, "confirm true, only max_cost_usd")
    await r.tool("graph_resume", {"run": "budget-paused", "confirm": True, "max_tokens": 1000},
                 "corpus token_budget_pause_resume: next node is a connector node")
    await r.tool("graph_resume", {"run": "appr-pub-resume"}, "run paused at an approval; preview")
    await r.tool("graph_resume", {"run": "appr-pub-resume", "confirm": True}, "run paused at an approval; confirm")
    await r.tool("graph_resume", {"run": "chain-ok", "confirm": True}, "already SUCCEEDED run")
    await r.tool("graph_resume", {"run": "failed-run", "confirm": True}, "FAILED run")
    await r.tool("graph_resume", {"run": "no-such-run"}, "bad: unknown run")
    await r.tool("graph_resume", {"run": "budget-pub", "max_tokens": "lots"}, "bad: max_tokens wrong type")
    await r.tool("graph_resume", {"run": "budget-pub-2", "confirm": True, "max_cost_usd": "cheap"}, "bad: max_cost_usd not a number")

    # loop tools
    await r.tool("bl_list", {}, "cwd has pyproject.toml and loops/")
    await r.tool("bl_lint", {"loop_dirs": ["loops/order-schema", str(WORK / "loops/tests-green")]}, "relative + absolute, both valid")
    await r.tool("bl_lint", {"loop_dirs": ["loops/broken-loop", "loops/nope"]}, "bad: broken manifest + missing dir")
    await r.tool("bl_lint", {"loop_dirs": []}, "empty list")
    await r.tool("bl_lint", {"loop_dirs": "loops/order-schema"}, "bad: string instead of list")
    await r.tool("bl_show", {"loop_dir": "loops/order-schema"}, "")
    await r.tool("bl_show", {"loop_dir": "loops/broken-loop"}, "bad: broken manifest")
    await r.tool("bl_show", {"loop_dir": "loops/nope"}, "bad: missing dir")
    await r.tool("bl_catalog", {}, "no filters (cwd has loops/)")
    await r.tool("bl_catalog", {"role": "backend"}, "role filter")
    await r.tool("bl_catalog", {"keyless": False}, "keyless=false: loops that need a key (and unreadable ones)")
    await r.tool("bl_search_loops", {"task_description": "make the failing pytest tests pass", "limit": 3}, "")
    await r.tool("bl_search_loops", {"task_description": "qqq zzzz"}, "no match")
    await r.tool("bl_search_loops", {"task_description": "json schema order", "limit": 0}, "limit 0")
    await r.tool("bl_search_loops", {}, "bad: task_description missing")
    await r.tool("bl_audit_loops", {}, "dirs omitted (= cwd)")
    await r.tool("bl_audit_loops", {"dirs": None}, "dirs null")
    await r.tool("bl_audit_loops", {"dirs": ["loops/order-schema"]}, "one loop dir")
    await r.tool("bl_audit_loops", {"dirs": ["loops/nope"]}, "missing dir")
    await r.tool("bl_run", {"loop_dir": "loops/order-schema", "confirm": False}, "preview")
    rec = r.calls[-1]
    await r.tool("bl_run", {"loop_dir": "loops/order-schema", "confirm": True}, "confirm without token")
    await r.tool("bl_run", {"loop_dir": "loops/order-schema", "confirm": True, "confirm_token": token_of(rec)}, "confirm with the preview's token")
    await r.tool("bl_runs", {"loop_dir": "loops/order-schema"}, "after a bl_run without run_id")

    # evidence tools
    await r.tool("bl_graph_terminal_runs", {}, "limit omitted")
    await r.tool("bl_graph_terminal_runs", {"limit": 0}, "limit 0")
    for ref, note in [("chain-ok", "SUCCEEDED run, by directory name"),
                      ("appr-pub-approve", "run finished through graph_approve over MCP"),
                      ("appr-bad", "run still paused at approval (not terminal)"),
                      ("graph-run", "the run's run_id (identity), not its directory name"),
                      ("../etc", "bad: traversal")]:
        await r.tool("bl_graph_evidence", {"run_ref": ref}, note)
        if ref in ("chain-ok", "appr-pub-approve", "appr-bad", "../etc"):
            await r.tool("bl_graph_execution_evidence", {"run_ref": ref}, note)

    # resources
    await r.resource("bounded-loops://catalog", "cwd has pyproject.toml and catalog/README.md")
    await r.resource("bounded-loops://loop/order-schema/manifest")
    await r.resource("bounded-loops://loop/order-schema/prompt")
    await r.resource("bounded-loops://loop/no-such-loop/manifest", "bad: unknown loop")
    await r.resource("bounded-loops://loop/no-such-loop/prompt", "bad: unknown loop")

    # prompts
    await r.prompt("run_loop", {"loop_dir": "loops/order-schema"})
    await r.prompt("write_loop", {"loop_name": "release-notes"}, "gate_kind omitted")
    await r.prompt("audit_loop", {"loop_dir": "loops/order-schema"})
    await r.prompt("run_loop", {}, "bad: loop_dir missing")
    await r.prompt("no_such_prompt", {}, "bad: unknown prompt")
    await r.tool("no_such_tool", {}, "bad: unknown tool")


async def body_empty(s: ClientSession, r: Recorder, meta: dict) -> None:
    await r.tool("bl_list", {}, "empty cwd: no pyproject.toml anywhere above")
    await r.tool("bl_catalog", {}, "empty cwd: falls back to the catalog bundled in the package")
    await r.tool("bl_audit_loops", {}, "empty cwd")
    await r.tool("graph_runs", {}, "empty cwd")
    await r.tool("bl_graph_terminal_runs", {}, "empty cwd")
    await r.tool("graph_interview", {"name": "first-graph"}, "empty cwd")
    await r.resource("bounded-loops://catalog", "empty cwd: no catalog/README.md")


async def body_envvar(s: ClientSession, r: Recorder, meta: dict) -> None:
    await r.tool("graph_runs", {}, "cwd empty, BOUNDED_LOOPS_WORKSPACE=<work>")
    await r.tool("bl_graph_terminal_runs", {"limit": 3}, "cwd empty, BOUNDED_LOOPS_WORKSPACE=<work>")
    await r.tool("bl_list", {}, "cwd empty, BOUNDED_LOOPS_WORKSPACE=<work>: not used by bl_list")


# ── rendering ────────────────────────────────────────────────────────────────


#: 64-hex digests are shown as their first 12 hex digits and an ellipsis.
HEX64 = __import__("re").compile(r"\b([0-9a-f]{12})[0-9a-f]{52}\b")

#: Keys whose string values are the substance of a result: shown up to this many characters.
LONG_KEYS = {"manifest": 1500, "text": 1500, "defaults_applied": 1500, "markdown": 1500,
             "how_to_execute": 1500, "what_approving_does": 1500, "message": 600, "reason": 600}

#: Tools outside the brief whose (large) results are rendered only to this nesting depth.
SHALLOW = {"bl_capabilities": 2, "graph_metrics": 2, "bl_gates": 3}


def trunc(value, maxstr=220, maxlist=2, maxdepth=99, _depth=0):
    """Shorten strings and lists; keep every mapping key (down to maxdepth)."""
    kw = dict(maxstr=maxstr, maxlist=maxlist, maxdepth=maxdepth, _depth=_depth + 1)
    if isinstance(value, str):
        value = HEX64.sub(lambda m: m.group(1) + "…", value)
        return value if len(value) <= maxstr else value[:maxstr] + f"…[+{len(value) - maxstr} chars]"
    if isinstance(value, list):
        if _depth >= maxdepth and value:
            return f"[…{len(value)} items]"
        head = [trunc(v, **kw) for v in value[:maxlist]]
        if len(value) > maxlist:
            head.append(f"…[+{len(value) - maxlist} more items]")
        return head
    if isinstance(value, dict):
        if _depth >= maxdepth and value:
            return "{…keys: " + ", ".join(value) + "}"
        return {HEX64.sub(lambda m: m.group(1) + "…", k):
                trunc(v, **{**kw, "maxstr": max(kw["maxstr"], LONG_KEYS.get(k, 0))})
                for k, v in value.items()}
    return value


def compact(value, level=0, width=300) -> str:
    """JSON, one line per value when it fits in `width`, otherwise one line per member."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(flat) + level <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = " " * (level + 1)
    if isinstance(value, dict):
        body = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {compact(v, level + 1, width)}"
                for k, v in value.items()]
        return "{\n" + ",\n".join(body) + "\n" + " " * level + "}"
    body = [pad + compact(v, level + 1, width) for v in value]
    return "[\n" + ",\n".join(body) + "\n" + " " * level + "]"


def shape(value):
    """The key structure of a JSON value: what must stay visible when it is abbreviated."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{shape(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + "|".join(sorted({shape(v) for v in value if isinstance(v, (dict, list)) and v})) + "]"
    return "·"


def collapse_seen(value, seen: set, top=True):
    """Inside a result, a large mapping whose key structure was already shown in full earlier
    keeps its scalar members and has its nested lists/mappings reduced to a count."""
    if isinstance(value, list):
        return [collapse_seen(v, seen, False) for v in value]
    if not isinstance(value, dict):
        return value
    sig = shape(value)
    def states(items):
        pairs = [f"{i['node_id']}={i['state']}" for i in items
                 if isinstance(i, dict) and "node_id" in i and "state" in i]
        return f"; states: {', '.join(pairs)}" if pairs else ""

    if not top and sig in seen and len(json.dumps(value)) > 300:
        return {k: (f"[…{len(v)} items; structure as shown earlier{states(v)}]"
                    if isinstance(v, list) and any(isinstance(i, (dict, list)) for i in v) else
                    "{…structure as shown earlier}" if isinstance(v, dict) and v else v)
                for k, v in value.items()}
    out = {k: collapse_seen(v, seen, False) for k, v in value.items()}
    if not top and len(json.dumps(value)) > 300:
        seen.add(sig)
    return out


def render_call(c: dict, root: str, seen: set, earlier: dict) -> str:
    depth = SHALLOW.get(c.get("tool"), 99)
    label = f"{c.get('tool') or c.get('prompt') or c.get('uri')} — {c['note'] or 'call'}"

    def j(v, dedupe=True, collapse=True, **kw):
        kw.setdefault("maxdepth", depth)
        if dedupe:
            key = json.dumps(v, sort_keys=True).replace(root, "<work>")
            if key in earlier and len(key) > 200:
                return f"(identical to the result of «{earlier[key]}» above)"
            earlier.setdefault(key, label)
        sig = shape(v)
        if collapse:
            v = collapse_seen(v, seen)
        if sig in seen and len(json.dumps(v)) > 1200:
            short = compact(trunc(v, **{**kw, "maxdepth": min(kw["maxdepth"], 2)}))
            if short != compact(trunc(v, **kw)):
                return "(same key structure as an earlier result; shown to depth 2)\n" + \
                    short.replace(root, "<work>")
        seen.add(sig)
        return compact(trunc(v, **kw)).replace(root, "<work>")

    def fs(changes: dict) -> str:
        d = {k: v for k, v in changes.items() if k != "events_appended"}
        text = compact(trunc(d, maxlist=30, maxstr=200), width=520).replace(root, "<work>")
        for log, events in changes.get("events_appended", {}).items():
            text += f"\nevents appended to {log}:"
            for e in events:
                line = f"{e['event_type']} {json.dumps(e['payload'], ensure_ascii=False)}"
                text += "\n  " + (line if len(line) <= 240 else line[:240] + "…")
        return text

    def block(v, **kw) -> str:
        body = j(v, **kw)
        if "\n" not in body and len(body) <= 400:
            return "`" + body + "`"
        return "\n```json\n" + body + "\n```"

    lines = []
    if c["kind"] == "tool":
        args = trunc(c["arguments"], maxstr=120)
        lines.append(f"#### `{c['tool']}` — {c['note'] or 'call'}  [{c['session']}]")
        head = "args `" + json.dumps(args, ensure_ascii=False).replace(root, "<work>") + "`"
        files = "files unchanged" if not c.get("fs_changes") else "files changed (below)"
        if "rpc_error" in c:
            lines.append(f"{head} → JSON-RPC error `{c['rpc_error']}`; {files}")
        else:
            sc = c.get("structuredContent")
            texts = [x.get("text") for x in c["content"] if x["type"] == "text"]
            kinds = [x["type"] for x in c["content"]]
            status = f"isError={str(c['isError']).lower()}; {files}"
            if kinds != ["text"]:
                status += f"; content types {kinds}"
            if sc is not None:
                status += "; structuredContent PRESENT"
            body = ""
            for t in texts:
                try:
                    body += block(json.loads(t))
                except ValueError:
                    body += "\n```text\n" + trunc(t, 1500).replace(root, "<work>") + "\n```"
            lines.append(f"{head} → {status} →{' ' if body.startswith('`') else ''}{body}")
            if sc is not None:
                lines.append("structuredContent:" + block(sc, dedupe=False))
        if c.get("fs_changes"):
            lines.append("```text\n" + fs(c["fs_changes"]) + "\n```")
    elif c["kind"] == "resource":
        lines.append(f"#### resource `{c['uri']}` — {c['note'] or 'read'}  [{c['session']}]")
        if "rpc_error" in c:
            lines.append(f"JSON-RPC error: `{c['rpc_error']}`")
        else:
            lines.append("```json\n" + j(c["contents"], collapse=False, maxstr=500) + "\n```")
    else:
        lines.append(f"#### prompt `{c['prompt']}` — {c['note'] or 'get'}  [{c['session']}]")
        lines.append("args: `" + json.dumps(c["arguments"]) + "`")
        if "rpc_error" in c:
            lines.append(f"JSON-RPC error: `{c['rpc_error']}`")
        else:
            lines.append("```json\n" + j(c["result"], collapse=False, maxstr=500) + "\n```")
    return "\n".join(lines) + "\n"


def render(record: dict) -> str:
    root = str(WORK)
    out = []
    groups: dict[str, list] = {}
    for c in record["calls"]:
        key = c.get("tool") or ("resources" if c["kind"] == "resource" else "prompts")
        groups.setdefault(key, []).append(c)
    seen: set = set()
    earlier: dict = {}
    for key, calls in groups.items():
        out.append(f"### {key}\n")
        out.extend(render_call(c, root, seen, earlier) for c in calls)
    site = str(VENV / "lib")
    return "\n".join(out).replace(str(EMPTY), "<empty>").replace(site, "<venv>/lib")


async def main() -> None:
    record = {"setup": setup()}
    TRUST.parent.mkdir(parents=True, exist_ok=True)
    TRUST.unlink(missing_ok=True)
    # bl_run(confirm=true) records a trust entry; keep it out of the real home directory.
    base_env = {"PATH": f"{WORK}/cases-approval_approved/fake-bin:{VENV}/bin:/usr/bin:/bin",
                "HOME": os.environ.get("HOME", "/root"),
                "BOUNDED_LOOPS_TRUST_STORE": str(TRUST)}
    meta, calls = await session(WORK, base_env, "work", body_main)
    record["meta"], record["calls"] = meta, calls
    _m, c2 = await session(EMPTY, base_env, "empty", body_empty)
    _m, c3 = await session(EMPTY, {**base_env, "BOUNDED_LOOPS_WORKSPACE": str(WORK)}, "envvar", body_envvar)
    record["calls"] += c2 + c3
    record["final_runs"] = {
        p.name: sorted(str(x.relative_to(p)) for x in p.rglob("*") if x.is_file())
        for p in sorted((WORK / ".bounded-loops/runs").iterdir())
    }
    record["trust_store_after"] = json.loads(TRUST.read_text()) if TRUST.exists() else None
    OUT.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str))
    OUT.with_suffix(".md").write_text(render(record))
    print(f"wrote {OUT.with_suffix('.json')} and {OUT.with_suffix('.md')} ({len(record['calls'])} calls)")


if __name__ == "__main__":
    asyncio.run(main())
