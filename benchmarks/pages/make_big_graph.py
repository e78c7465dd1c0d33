#!/usr/bin/env python3
"""Writes a graph for the pages benchmark: N local_cli nodes, each (after
the first few) fed by PARENTS distinct earlier nodes (every 40th by one
more), so edges are a little over PARENTS*N; a fake `claude` that fails each node's first attempt and every
other node's second, so the run logs about 10 events a node; and its
connections and inputs. Also writes `studio-500.yaml`, a valid manifest of
500 nodes for the studio's keystroke figure.

usage: make_big_graph.py N PARENTS OUT_DIR
"""
import json, os, random, stat, sys

n, parents, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.makedirs(os.path.join(out, "fake-bin"), exist_ok=True)
os.makedirs(os.path.join(out, "state"), exist_ok=True)
rng = random.Random(7)


def graph(count, with_slots):
    nodes, edges, slots, conns, inputs = [], [], [], [], {}
    for i in range(count):
        nid = f"n{i:05d}"
        # PARENTS distinct earlier nodes (one more for every 40th), so a
        # graph of 10,000 nodes has a little over 30,000 edges.
        lo = max(0, i - 200)
        feeds = sorted(rng.sample(range(lo, i), min(i - lo, parents + (i % 40 == 0))))
        node = {"id": nid, "kind": "research_claim",
                "inputs": {f"in{k}": "text" for k in range(len(feeds))}, "outputs": {"out": "text"},
                "budget": {"max_attempts": 3, "max_wallclock_s": 60}, "effects": ["read_only"],
                "isolation": "workspace_only"}
        if with_slots:
            slot = f"slot-{i:05d}"
            node["connection_slot"] = slot
            slots.append({"id": slot, "requires": ["chat"], "data_class_max": "internal"})
            conns.append({"binding_id": f"bind-{slot}", "slot_id": slot, "connector_id": "local_cli",
                          "connector_version": "1.0.0", "connection_id": f"conn-{slot}",
                          "admission_digest": "sha256:" + "1" * 64, "route_policy_digest": "sha256:" + "2" * 64,
                          "provider_id": "claude", "model_target": "fake-model", "region": "local",
                          "fallback": False, "capabilities": ["chat"], "data_class_max": "internal",
                          "allowed_effects": ["read_only", "workspace_write"], "isolation": "workspace_only",
                          "transport": "local_cli", "admitted": True})
        nodes.append(node)
        for k, parent in enumerate(feeds):
            edges.append({"from_node": f"n{parent:05d}", "from_port": "out", "to_node": nid, "to_port": f"in{k}"})
        inputs[nid] = nid
    manifest = {"api_version": "bounded-loops.dev/graph/v1", "graph_id": "pages-bench", "version": "1.0.0",
                "nodes": nodes, "edges": edges, "connection_slots": slots,
                "policies": {"data_class": "internal", "fail_mode": "fail_closed"}}
    return manifest, conns, inputs


manifest, conns, inputs = graph(n, True)
for name, value in [("manifest.json", manifest), ("connections.json", conns), ("inputs.json", inputs)]:
    with open(os.path.join(out, name), "w") as f:
        json.dump(value, f)
studio, _, _ = graph(500, False)
with open(os.path.join(out, "studio-500.yaml"), "w") as f:
    # JSON is YAML; the studio lints it as YAML, as a person's file would be.
    json.dump(studio, f, indent=1)

state = os.path.abspath(os.path.join(out, "state"))
claude = os.path.join(out, "fake-bin", "claude")
ok = ('{"type":"result","subtype":"success","is_error":false,"result":"reply","num_turns":1,'
      '"session_id":"bench","total_cost_usd":0.0,"usage":{"input_tokens":10,'
      '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":5}}')
with open(claude, "w") as f:
    f.write(f"""#!/bin/sh
# The prompt is the node's id: count its attempts.
node=$(head -c 6)
cat >/dev/null
tries=$(cat "{state}/$node" 2>/dev/null || echo 0)
tries=$((tries + 1))
echo $tries > "{state}/$node"
last=$(printf %s "$node" | tail -c 1)
if [ $tries -eq 1 ] || {{ [ $tries -eq 2 ] && [ $((last % 2)) -eq 0 ]; }}; then
  echo "the model timed out" >&2
  exit 1
else
  printf '%s\\n' '{ok}'
fi
""")
os.chmod(claude, os.stat(claude).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
