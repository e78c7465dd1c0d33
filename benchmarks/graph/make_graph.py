#!/usr/bin/env python3
"""Writes a graph of N independent local_cli nodes (each with its own slot
and binding), its connections and inputs, and a fake instant `claude` CLI
whose reply differs from node to node (it repeats the first line of its
prompt, which names the node), as an agent's would: each node stores an
artifact of its own. Not its process id: in a cage every agent is pid 1,
and all the caged nodes' replies were one artifact.

usage: make_graph.py N ISOLATION OUT_DIR
"""
import json, os, stat, sys

n, isolation, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.makedirs(os.path.join(out, "fake-bin"), exist_ok=True)
nodes, slots, conns, inputs = [], [], [], {}
for i in range(n):
    nid, slot = f"n{i:05d}", f"slot-{i:05d}"
    nodes.append({"id": nid, "kind": "research_claim", "inputs": {}, "outputs": {"out": "text"},
                  "budget": {"max_attempts": 1, "max_wallclock_s": 60}, "effects": ["read_only"],
                  "isolation": isolation, "connection_slot": slot})
    slots.append({"id": slot, "requires": ["chat"], "data_class_max": "internal"})
    conns.append({"binding_id": f"bind-{slot}", "slot_id": slot, "connector_id": "local_cli",
                  "connector_version": "1.0.0", "connection_id": f"conn-{slot}",
                  "admission_digest": "sha256:" + "1" * 64, "route_policy_digest": "sha256:" + "2" * 64,
                  "provider_id": "claude", "model_target": "fake-model", "region": "local",
                  "fallback": False, "capabilities": ["chat"], "data_class_max": "internal",
                  "allowed_effects": ["read_only", "workspace_write"], "isolation": isolation,
                  "transport": "local_cli", "admitted": True})
    inputs[nid] = f"ok {nid}"
manifest = {"api_version": "bounded-loops.dev/graph/v1", "graph_id": "bench", "version": "1.0.0",
            "nodes": nodes, "edges": [], "connection_slots": slots,
            "policies": {"data_class": "internal", "fail_mode": "fail_closed"}}
for name, value in [("manifest.json", manifest), ("connections.json", conns), ("inputs.json", inputs)]:
    with open(os.path.join(out, name), "w") as f:
        json.dump(value, f)
claude = os.path.join(out, "fake-bin", "claude")
with open(claude, "w") as f:
    # `read` is the shell's own: no process more than before.
    f.write("#!/bin/sh\nread -r prompt\ncat >/dev/null\n"
            "printf '%s\\n' '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,"
            "\"result\":\"reply to '\"$prompt\"'\",\"num_turns\":1,\"session_id\":\"bench\",\"total_cost_usd\":0.0,"
            "\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":0,"
            "\"cache_read_input_tokens\":0,\"output_tokens\":5}}'\n")
os.chmod(claude, os.stat(claude).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
