#!/usr/bin/env python3
"""Writes the graph/v1 lint corpus: one manifest per case, and beside it the
exit code and JSON that a reference `bl graph lint --json` printed for it.

    /path/to/reference-venv/bin/python tests/corpus/graph/generate.py --reference /path/to/reference/bl

The manifests are ours. The expected outputs are what the bounded-loops 0.7.6
CLI printed, recorded as facts to stay compatible with; `cargo test -p bl-graph`
checks bl against them. Re-run only to add cases.
"""
import argparse, copy, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")

def node(id, kind="research_claim", **kw):
    n = {"id": id, "kind": kind, "inputs": {}, "outputs": {},
         "budget": {"max_attempts": 1, "max_wallclock_s": 60, "max_tokens": 100, "max_cost_microunits": 0},
         "effects": ["read_only"], "isolation": "workspace_only"}
    n.update(kw)
    return n

def graph(node_list, edges=(), slots=(), policies=None, **kw):
    g = {"api_version": "bounded-loops.dev/graph/v1", "graph_id": "g", "version": "1.0.0",
         "nodes": list(node_list), "edges": list(edges), "connection_slots": list(slots),
         "policies": policies or {"data_class": "internal", "fail_mode": "fail_closed"}}
    g.update(kw)
    return g

def edge(a, ap, b, bp, **kw):
    e = {"from_node": a, "from_port": ap, "to_node": b, "to_port": bp}
    e.update(kw)
    return e

CONT = {"data_class": "internal", "fail_mode": "continue_declared"}
REPAIR = {"data_class": "internal", "fail_mode": "continue_declared", "repair_budget": 2}
SLOT = {"id": "s", "requires": ["chat"], "data_class_max": "internal"}
DIGEST = "sha256:" + "a" * 64

def chain(*ids, port="doc", typ="text"):
    nodes, edges = [], []
    for i, nid in enumerate(ids):
        inputs = {port: typ} if i else {}
        outputs = {port: typ} if i < len(ids) - 1 else {}
        nodes.append(node(nid, inputs=inputs, outputs=outputs))
        if i:
            edges.append(edge(ids[i - 1], port, nid, port))
    return nodes, edges

def all_kinds():
    nodes = [
        node("src", "research_source", source_policy="web", outputs={"doc": "text"}),
        node("claim", inputs={"doc": "text"}, outputs={"doc": "text"}),
        node("aud", "audit", audit_profile="standard", inputs={"doc": "text"}, outputs={"doc": "text"}),
        node("tl", "tool", tool_ref="fmt", inputs={"doc": "text"}, outputs={"doc": "text"}),
        node("lp", "loop", loop_package=DIGEST, inputs={"doc": "text"}, outputs={"doc": "text"}),
        node("ok", "approval", required_role="editor", inputs={"doc": "text"}, outputs={"doc": "text"}),
        node("pub", "publish", publication_policy="outbox", inputs={"doc": "text"},
             effects=["external_write"]),
    ]
    ids = [n["id"] for n in nodes]
    edges = [edge(a, "doc", b, "doc") for a, b in zip(ids, ids[1:])]
    return graph(nodes, edges, presentation={"title": "All kinds", "ünïcode": "✓"})

def cases():
    c = {}
    n2, e2 = chain("fetch", "write")
    base = graph(n2, e2)
    c["valid_chain"] = base
    c["valid_all_kinds"] = all_kinds()
    c["valid_slot"] = graph([node("a", connection_slot="s")], slots=[SLOT])
    c["valid_slot_modalities"] = graph([node("a", connection_slot="s")],
        slots=[dict(SLOT, requires=["tools", "chat"], preferred_modalities=["text", "image"])])
    n3, e3 = chain("a", "b", "c")
    c["valid_repair"] = graph(n3, e3, policies=REPAIR)
    c["valid_repair"]["nodes"][2]["on_failure"] = {"mode": "repair", "target": "a"}
    c["valid_when_guards"] = graph([node("a", outputs={"x": "t"}), node("b", inputs={"x": "t"}), node("c", inputs={"x": "t"})],
        [edge("a", "x", "b", "x", when="failed"), edge("a", "x", "c", "x", when="terminal")], policies=CONT)
    c["valid_when_null_succeeded"] = graph([node("a", outputs={"x": "t"}), node("b", inputs={"x": "t"}), node("c", inputs={"x": "t"})],
        [edge("a", "x", "b", "x", when=None), edge("a", "x", "c", "x", when="succeeded")])
    c["valid_router"] = graph([node("r", "router", routes={"yes": "a"}, default_route=None, outputs={"x": "t"}), node("a", inputs={"x": "t"})],
        [edge("r", "x", "a", "x")])
    c["valid_join"] = graph([node("a", outputs={"x": "t"}), node("b", outputs={"x": "t"}), node("j", "join", mode="any_successful", inputs={"x": "t"})],
        [edge("a", "x", "j", "x"), edge("b", "x", "j", "x")])
    c["valid_fail_graph"] = graph([node("a", on_failure="fail_graph")])
    c["valid_null_cost"] = graph([node("a", budget={"max_attempts": 3, "max_wallclock_s": 86400, "max_tokens": 5, "max_cost_microunits": None})])
    c["valid_repair_budget_zero"] = graph([node("a")], policies={"data_class": "internal", "fail_mode": "fail_closed", "repair_budget": 0, "required_audit_profile": "std"})

    # Whole-document scans.
    c["secret_field_nested"] = graph([node("a", presentation_note=None)], presentation={"x": {"api_key": "k"}})
    c["secret_field_top"] = graph([node("a")], presentation={"token_count": 1})
    c["secret_field_null_max_tokens"] = graph([node("a", budget={"max_attempts": 1, "max_wallclock_s": 60, "max_tokens": None, "max_cost_microunits": 0})])
    c["secret_field_password"] = graph([node("a")], presentation={"list": [{"Password": 1}]})
    c["absolute_path_unix"] = graph([node("a")], presentation={"p": "/etc/passwd"})
    c["absolute_path_home"] = graph([node("a", tool_ref="~/bin/x", kind="tool")])
    c["absolute_path_windows"] = graph([node("a")], presentation={"p": ["C:\\x"]})
    c["absolute_path_backslash"] = graph([node("a")], presentation={"p": "\\\\server\\share"})
    c["secret_before_absolute"] = graph([node("a")], presentation={"p": "/etc", "secret": 1})

    # Top level.
    c["unknown_field_top"] = graph([node("a")], extra=1)
    c["missing_field_top"] = {k: v for k, v in base.items() if k != "policies"}
    c["missing_graph_id"] = {k: v for k, v in base.items() if k != "graph_id"}
    c["api_version_wrong"] = graph([node("a")], api_version="bounded-loops.dev/graph/v2")
    c["api_version_number"] = graph([node("a")], api_version=1)
    c["graph_id_upper"] = graph([node("a")], graph_id="Graph")
    c["graph_id_number"] = graph([node("a")], graph_id=7)
    c["graph_id_long"] = graph([node("a")], graph_id="a" * 64)
    c["version_not_semver"] = graph([node("a")], version="1.0")
    c["version_prerelease"] = graph([node("a")], version="1.0.0-rc.1+build.5")
    c["version_number"] = graph([node("a")], version=1)
    c["nodes_not_list"] = graph([node("a")], nodes={"a": 1})
    c["nodes_empty"] = graph([])
    c["node_not_object"] = graph([node("a"), "b"])
    c["top_not_object"] = [1, 2]

    # Nodes.
    c["unknown_node_kind"] = graph([node("a", "magic")])
    c["node_kind_number"] = graph([node("a", 5)])
    c["node_unknown_field"] = graph([node("a", colour="red")])
    c["node_missing_budget"] = graph([{k: v for k, v in node("a").items() if k != "budget"}])
    c["node_missing_id"] = graph([{k: v for k, v in node("a").items() if k != "id"}])
    c["node_id_bad"] = graph([node("A")])
    c["node_id_dash_underscore"] = graph([node("a-b_c")])
    c["inputs_not_object"] = graph([node("a", inputs=["x"])])
    c["port_type_not_string"] = graph([node("a", outputs={"x": 1})])
    c["port_name_bad"] = graph([node("a", outputs={"X Y": "t"})])
    c["budget_unknown_field"] = graph([node("a", budget={"max_attempts": 1, "max_wallclock_s": 60, "max_tokens": 1, "max_cost_microunits": 0, "max_retries": 1})])
    c["budget_missing_field"] = graph([node("a", budget={"max_attempts": 1, "max_wallclock_s": 60, "max_tokens": 1})])
    c["budget_attempts_zero"] = graph([node("a", budget={"max_attempts": 0, "max_wallclock_s": 60, "max_tokens": 1, "max_cost_microunits": 0})])
    c["budget_attempts_101"] = graph([node("a", budget={"max_attempts": 101, "max_wallclock_s": 60, "max_tokens": 1, "max_cost_microunits": 0})])
    c["budget_attempts_string"] = graph([node("a", budget={"max_attempts": "1", "max_wallclock_s": 60, "max_tokens": 1, "max_cost_microunits": 0})])
    c["budget_attempts_bool"] = graph([node("a", budget={"max_attempts": True, "max_wallclock_s": 60, "max_tokens": 1, "max_cost_microunits": 0})])
    c["budget_attempts_float"] = graph([node("a", budget={"max_attempts": 1.0, "max_wallclock_s": 60, "max_tokens": 1, "max_cost_microunits": 0})])
    c["budget_wallclock_big"] = graph([node("a", budget={"max_attempts": 1, "max_wallclock_s": 86401, "max_tokens": 1, "max_cost_microunits": 0})])
    c["budget_tokens_zero"] = graph([node("a", budget={"max_attempts": 1, "max_wallclock_s": 60, "max_tokens": 0, "max_cost_microunits": 0})])
    c["budget_cost_negative"] = graph([node("a", budget={"max_attempts": 1, "max_wallclock_s": 60, "max_tokens": 1, "max_cost_microunits": -1})])
    c["budget_not_object"] = graph([node("a", budget=5)])
    c["effects_unknown"] = graph([node("a", effects=["teleport"])])
    c["effects_not_list"] = graph([node("a", effects="read_only")])
    c["effects_empty"] = graph([node("a", effects=[])])
    c["duplicate_effect"] = graph([node("a", effects=["read_only", "read_only"])])
    c["retry_of_effectful_node"] = graph([node("a", effects=["financial"], budget={"max_attempts": 2, "max_wallclock_s": 60, "max_tokens": 1, "max_cost_microunits": 0})])
    c["retry_effectful_and_duplicate"] = graph([node("a", effects=["irreversible", "irreversible"], budget={"max_attempts": 2, "max_wallclock_s": 60, "max_tokens": 1, "max_cost_microunits": 0})])
    c["isolation_unknown"] = graph([node("a", isolation="vm")])
    c["on_failure_continue"] = graph([node("a", on_failure="continue")], policies=CONT)
    c["on_failure_await_human"] = graph([node("a", on_failure="await_human")], policies=CONT)
    c["on_failure_bare_repair"] = graph([node("a", on_failure="repair")], policies=REPAIR)
    c["on_failure_unknown"] = graph([node("a", on_failure="explode")])
    c["on_failure_object_bad_mode"] = graph([node("a", on_failure={"mode": "retry", "target": "a"})], policies=REPAIR)
    c["on_failure_object_extra"] = graph([node("a", on_failure={"mode": "repair", "target": "a", "x": 1})], policies=REPAIR)
    c["on_failure_number"] = graph([node("a", on_failure=3)])
    c["repair_target_self"] = graph([node("a", on_failure={"mode": "repair", "target": "a"})], policies=REPAIR)
    n3r, e3r = chain("a", "b", "c")
    n3r[0]["on_failure"] = {"mode": "repair", "target": "c"}
    c["repair_target_descendant"] = graph(n3r, e3r, policies=REPAIR)
    c["repair_target_missing"] = graph([node("a", on_failure={"mode": "repair", "target": "zz"})], policies=REPAIR)
    n3b, e3b = chain("a", "b", "c")
    n3b[2]["on_failure"] = {"mode": "repair", "target": "a"}
    c["repair_budget_zero"] = graph(n3b, e3b, policies={"data_class": "internal", "fail_mode": "continue_declared", "repair_budget": 0})
    c["repair_fail_closed"] = graph(copy.deepcopy(n3b), e3b, policies={"data_class": "internal", "fail_mode": "fail_closed", "repair_budget": 2})
    c["loop_package_mutable"] = graph([node("a", "loop", loop_package="my-loop@latest")])
    c["loop_package_missing"] = graph([node("a", "loop")])
    c["loop_package_short"] = graph([node("a", "loop", loop_package="sha256:abc")])
    c["loop_package_upper"] = graph([node("a", "loop", loop_package="sha256:" + "A" * 64)])
    c["tool_ref_missing"] = graph([node("a", "tool")])
    c["kind_field_on_wrong_kind"] = graph([node("a", tool_ref="x")])
    c["router_no_routes"] = graph([node("a", "router", default_route=None)])
    c["router_no_default_key"] = graph([node("a", "router", routes={"x": "a"})])
    c["router_empty_routes"] = graph([node("a", "router", routes={}, default_route=None)])
    c["join_mode_bad"] = graph([node("a", outputs={"x": "t"}), node("j", "join", mode="some", inputs={"x": "t"})], [edge("a", "x", "j", "x")])
    c["join_no_edges"] = graph([node("j", "join", mode="all_selected")])
    c["join_missing_mode"] = graph([node("a", outputs={"x": "t"}), node("j", "join", inputs={"x": "t"})], [edge("a", "x", "j", "x")])
    c["audit_profile_missing"] = graph([node("a", "audit")])
    c["audit_profile_mismatch"] = graph([node("a", "audit", audit_profile="lite")], policies={"data_class": "internal", "fail_mode": "fail_closed", "required_audit_profile": "strict"})
    c["audit_required_no_audit_node"] = graph([node("a")], policies={"data_class": "internal", "fail_mode": "fail_closed", "required_audit_profile": "strict"})
    c["approval_missing_role"] = graph([node("a", "approval")])
    c["publish_missing_policy"] = graph([node("a", "publish")])
    c["subgraph_digest"] = graph([node("a", "subgraph", graph_package=DIGEST)])
    c["research_source_missing_policy"] = graph([node("a", "research_source")])
    c["duplicate_node_id"] = graph([node("a"), node("b"), node("a")])
    c["connection_slot_unknown"] = graph([node("a", connection_slot="nope")])
    c["connection_slot_number"] = graph([node("a", connection_slot=3)], slots=[SLOT])

    # Edges.
    c["edges_not_list"] = dict(graph([node("a")]), edges={"x": 1})
    c["edge_unknown_field"] = graph(n2, [dict(e2[0], label="x")])
    c["edge_missing_field"] = graph(n2, [{k: v for k, v in e2[0].items() if k != "to_port"}])
    c["unknown_edge_node_from"] = graph(n2, [edge("nope", "doc", "write", "doc")])
    c["unknown_edge_node_to"] = graph(n2, [edge("fetch", "doc", "nope", "doc")])
    c["missing_output_port"] = graph(n2, [edge("fetch", "zzz", "write", "doc")])
    c["missing_input_port"] = graph(n2, [edge("fetch", "doc", "write", "zzz")])
    c["port_type_mismatch"] = graph([node("a", outputs={"x": "text"}), node("b", inputs={"x": "json"})], [edge("a", "x", "b", "x")])
    c["cycle"] = graph([node("a", inputs={"x": "t"}, outputs={"x": "t"}), node("b", inputs={"x": "t"}, outputs={"x": "t"})],
        [edge("a", "x", "b", "x"), edge("b", "x", "a", "x")])
    c["self_loop"] = graph([node("a", inputs={"x": "t"}, outputs={"x": "t"})], [edge("a", "x", "a", "x")])
    c["edge_condition_bad"] = graph(n2, [dict(e2[0], when="result.status == 'failed'")])
    c["edge_condition_failed_fail_closed"] = graph(n2, [dict(e2[0], when="failed")])
    c["edge_condition_skipped_fail_closed"] = graph(n2, [dict(e2[0], when="skipped")])
    c["edge_condition_number"] = graph(n2, [dict(e2[0], when=1)])
    c["edge_before_node_error"] = graph([node("a", isolation="vm")], [edge("nope", "x", "a", "x")])

    # Slots.
    c["slots_not_list"] = dict(graph([node("a")]), connection_slots={"s": 1})
    c["slot_unknown_field"] = graph([node("a")], slots=[dict(SLOT, model="x")])
    c["slot_missing_requires"] = graph([node("a")], slots=[{"id": "s", "data_class_max": "internal"}])
    c["slot_requires_empty"] = graph([node("a")], slots=[dict(SLOT, requires=[])])
    c["slot_requires_duplicate"] = graph([node("a")], slots=[dict(SLOT, requires=["chat", "chat"])])
    c["provider_in_slot"] = graph([node("a")], slots=[dict(SLOT, requires=["chat", "anthropic"])])
    c["provider_in_slot_upper"] = graph([node("a")], slots=[dict(SLOT, requires=["OpenAI"])])
    c["duplicate_slot_id"] = graph([node("a")], slots=[SLOT, SLOT])
    c["slot_data_class_bad"] = graph([node("a")], slots=[dict(SLOT, data_class_max="top_secret")])
    c["slot_id_bad"] = graph([node("a")], slots=[dict(SLOT, id="S S")])

    # Policies.
    c["policies_unknown_field"] = graph([node("a")], policies={"data_class": "internal", "fail_mode": "fail_closed", "retries": 1})
    c["policies_missing_fail_mode"] = graph([node("a")], policies={"data_class": "internal"})
    c["policies_fail_mode_bad"] = graph([node("a")], policies={"data_class": "internal", "fail_mode": "yolo"})
    c["policies_data_class_bad"] = graph([node("a")], policies={"data_class": "secretish", "fail_mode": "fail_closed"})
    c["policies_repair_budget_101"] = graph([node("a")], policies={"data_class": "internal", "fail_mode": "continue_declared", "repair_budget": 101})
    c["policies_audit_profile_number"] = graph([node("a")], policies={"data_class": "internal", "fail_mode": "fail_closed", "required_audit_profile": 5})
    c["policies_audit_profile_string"] = graph([node("a")], policies={"data_class": "internal", "fail_mode": "fail_closed", "required_audit_profile": "strict"})
    c["policies_fail_mode_before_data_class"] = graph([node("a")], policies={"data_class": "x", "fail_mode": "x"})
    c["duplicate_edge_pair_is_a_cycle"] = graph([node("a", outputs={"x": "t", "y": "t"}), node("b", inputs={"x": "t", "y": "t"})], [edge("a", "x", "b", "x"), edge("a", "y", "b", "y")])
    c["when_upper_and_spaces"] = graph(n2, [dict(e2[0], when=" SUCCEEDED ")])
    c["when_blank"] = graph(n2, [dict(e2[0], when="  ")])
    c["slot_requires_then_id"] = graph([node("a")], slots=[dict(SLOT, id="S", requires=[])])
    c["node_id_checked_last"] = graph([node("A", "loop", loop_package="x")])
    c["policies_not_object"] = dict(graph([node("a")]), policies=[1])
    return c

RAW = {
    "invalid_json.json": '{"api_version": ',
    "duplicate_key.json": '{"api_version": "bounded-loops.dev/graph/v1", "graph_id": "g", "graph_id": "h"}',
    "invalid_yaml.yaml": "api_version: [\n",
    "duplicate_key.yaml": "api_version: bounded-loops.dev/graph/v1\ngraph_id: g\ngraph_id: h\n",
    "yaml_top_scalar.yaml": "just a string\n",
    "empty.yaml": "",
    "unsupported.txt": "{}",
    "yaml_version_float.yaml": None,  # filled in below
    "yaml_bool_words.yaml": None,
    "yaml_anchor.yaml": None,
}

def yaml_text(doc):
    import yaml  # PyYAML, which the reference venv has
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)

CANDIDATE = {"binding_id": "b1", "slot_id": "s", "connector_id": "local_cli", "connector_version": "1",
             "connection_id": "c1", "admission_digest": "sha256:" + "1" * 64,
             "route_policy_digest": "sha256:" + "2" * 64, "provider_id": "claude", "model_target": "m",
             "region": "local", "fallback": False, "capabilities": ["chat", "tools"],
             "data_class_max": "confidential", "allowed_effects": ["read_only", "workspace_write"],
             "isolation": "container_restricted", "transport": "local_cli", "admitted": True}

def cand(**kw):
    return dict(CANDIDATE, **kw)

# Loop packages for the plan cases (our own content): name -> {path: (text, mode)}.
PACKAGES = {
    "packages/review": {
        "loop.yaml": ("name: review\ngoal: leave a review note in review.md\n", 0o644),
        "gate.sh": ("#!/bin/sh\ntest -s review.md\n", 0o755),
        "prompts/task.md": ("Write review.md for the change in this workspace.\n", 0o644),
    },
    "packages/lint": {
        "loop.yaml": ("name: lint\ngoal: make the linter pass\n", 0o644),
        "bounds.yaml": ("max_laps: 3\n", 0o644),
    },
    # A second root holding a copy of review: with both roots, one digest
    # names two directories.
    "packages-copy/review-again": {
        "loop.yaml": ("name: review\ngoal: leave a review note in review.md\n", 0o644),
        "gate.sh": ("#!/bin/sh\ntest -s review.md\n", 0o755),
        "prompts/task.md": ("Write review.md for the change in this workspace.\n", 0o644),
    },
}

def write_packages(plans):
    for package, files in PACKAGES.items():
        for rel, (text, mode) in files.items():
            path = os.path.join(plans, package, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(path, mode)

def loop_cases(reference, plans):
    """Plan cases naming loop packages by the digest the reference prints."""
    digest = lambda package: subprocess.run(
        [reference, "graph", "digest", os.path.join(plans, package)],
        capture_output=True, text=True, check=True).stdout.strip()
    review, lint = digest("packages/review"), digest("packages/lint")
    two = graph([node("r", "loop", loop_package=review, outputs={"doc": "text"}),
                 node("l", "loop", loop_package=lint, inputs={"doc": "text"})],
                [edge("r", "doc", "l", "doc")])
    return {
        "plan_loop_packages": (two, None, ["packages"]),
        "plan_loop_packages_dot_root": (two, None, ["./packages/", "missing-root"]),
        "plan_loop_package_no_roots": (two, None, []),
        "plan_loop_package_changed": (graph([node("r", "loop", loop_package=DIGEST)]), None, ["packages"]),
        "plan_loop_package_shared_digest": (two, None, ["packages", "packages-copy"]),
    }

def plan_cases():
    """(manifest case, connections or None) pairs for `bl graph plan`."""
    SLOTTED = graph([node("a", connection_slot="s", outputs={"x": "t"}),
                     node("b", "approval", required_role="ed", inputs={"x": "t"}, outputs={"x": "t"}),
                     node("c", inputs={"x": "t"}, on_failure={"mode": "repair", "target": "a"}, connection_slot="s")],
                    [edge("a", "x", "b", "x"), edge("b", "x", "c", "x")], slots=[SLOT], policies=REPAIR)
    WIDE = graph([node(f"n{i}", outputs={"x": "t"}) for i in range(12)] + [node("j", "join", mode="all_successful", inputs={"x": "t"})],
                 [edge(f"n{i}", "x", "j", "x") for i in range(12)])
    return {
        "plan_chain": ("valid_chain", None),
        "plan_all_kinds": ("valid_all_kinds", None),
        "plan_repair": ("valid_repair", None),
        "plan_join": ("valid_join", None),
        "plan_guards": ("valid_when_guards", None),
        "plan_wide": (WIDE, None),
        "plan_slot_no_connections": ("valid_slot", None),
        "plan_slotted": (SLOTTED, [cand(), cand(binding_id="a0", admitted=False)]),
        "plan_two_admitted": (SLOTTED, [cand(binding_id="z9"), cand(binding_id="a1", provider_id="codex")]),
        "plan_not_admitted": (SLOTTED, [cand(admitted=False)]),
        "plan_capability": (SLOTTED, [cand(capabilities=["tools"])]),
        "plan_data_class": (SLOTTED, [cand(data_class_max="public")]),
        "plan_effects": (SLOTTED, [cand(allowed_effects=["workspace_write"])]),
        "plan_isolation": (graph([node("a", connection_slot="s", isolation="container_restricted")], slots=[SLOT]), [cand(isolation="process_restricted")]),
        "plan_no_slot_match": (SLOTTED, [cand(slot_id="other"), cand(slot_id="another")]),
        "plan_empty_connections": (SLOTTED, []),
        "plan_bad_shape": (SLOTTED, [dict(CANDIDATE, extra=1)]),
        "plan_admitted_not_bool": (SLOTTED, [cand(admitted="yes")]),
        "plan_connections_object": (SLOTTED, {"b1": CANDIDATE}),
        "plan_unused_slot": (graph([node("a")], slots=[SLOT]), [cand()]),
        "plan_invalid_manifest": ("cycle", None),
        "plan_fallback_values": (graph([node("a", connection_slot="s")], slots=[SLOT]), [cand(fallback=None, transport="https")]),
    }

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True, help="the reference bl executable")
    args = ap.parse_args()
    os.makedirs(CASES, exist_ok=True)
    files = {}
    for name, doc in cases().items():
        files[name + ".json"] = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    # A few YAML twins of JSON cases: same graph, same digest expected.
    for name in ["valid_chain", "valid_all_kinds", "valid_repair", "valid_slot_modalities", "cycle", "secret_field_nested"]:
        files[name + "_yaml.yaml"] = yaml_text(cases()[name])
    raw = dict(RAW)
    raw["yaml_version_float.yaml"] = yaml_text(cases()["valid_chain"]).replace("version: 1.0.0", "version: 1.0")
    raw["yaml_bool_words.yaml"] = yaml_text(cases()["valid_chain"]).replace("max_attempts: 1", "max_attempts: yes", 1)
    raw["yaml_anchor.yaml"] = (
        "api_version: bounded-loops.dev/graph/v1\ngraph_id: g\nversion: 1.0.0\n"
        "x-budget: &b {max_attempts: 1, max_wallclock_s: 60, max_tokens: 1, max_cost_microunits: 0}\n"
        "nodes:\n- {id: a, kind: research_claim, inputs: {}, outputs: {}, budget: *b, effects: [read_only], isolation: workspace_only}\n"
        "edges: []\nconnection_slots: []\npolicies: {data_class: internal, fail_mode: fail_closed}\n")
    # How PyYAML reads text yaml-rust2 reads differently: tabs, control
    # characters, line breaks, tags, merge keys, block scalars in flow.
    base = yaml_text(cases()["valid_chain"])
    one = lambda old, new: base.replace(old, new, 1)
    raw.update({
        "yaml_tab_trailing.yaml": one("graph_id: g\n", "graph_id: g\t\n"),
        "yaml_tab_inside_plain.yaml": one("graph_id: g\n", "graph_id: g\tx\n"),
        "yaml_tab_indent.yaml": one("  kind: research_claim", "\tkind: research_claim"),
        "yaml_tab_after_colon.yaml": one("graph_id: g", "graph_id:\tg"),
        "yaml_tab_in_flow.yaml": one("  inputs: {}", "  inputs: {\t}"),
        "yaml_tab_in_comment.yaml": one("graph_id: g\n", "graph_id: g # a\tcomment\n"),
        "yaml_tab_in_quotes.yaml": one("graph_id: g\n", "graph_id: \"g\tx\"\n"),
        "yaml_tab_in_block_scalar.yaml": one("graph_id: g\n", "graph_id: |\n  g\tx\n"),
        "yaml_control_char.yaml": one("graph_id: g", "graph_id: g\x07"),
        "yaml_nul.yaml": base + "\x00",
        "yaml_bom.yaml": "\ufeff" + base,
        "json_bom.json": "\ufeff" + json.dumps(cases()["valid_chain"]),
        "yaml_nel_break.yaml": one("graph_id: g", "graph_id: g\u0085x"),
        "yaml_line_separator.yaml": one("graph_id: g", "graph_id: g\u2028x"),
        "yaml_lone_cr.yaml": base.replace("\n", "\r"),
        "yaml_crlf.yaml": base.replace("\n", "\r\n"),
        "yaml_merge_key.yaml": one("  budget:\n", "  budget:\n    <<: {max_attempts: 1}\n"),
        "yaml_value_key.yaml": one("max_attempts: 1", "max_attempts: ="),
        "yaml_explicit_float.yaml": one("max_attempts: 1", "max_attempts: !!float 1"),
        "yaml_explicit_int.yaml": one("max_attempts: 1", "max_attempts: !!int '0x1'"),
        "yaml_explicit_str.yaml": one("max_attempts: 1", "max_attempts: !!str 1"),
        "yaml_binary.yaml": one("max_attempts: 1", "max_attempts: !!binary aGk="),
        "yaml_python_tag.yaml": one("max_attempts: 1", "max_attempts: !!python/int 1"),
        "yaml_local_tag.yaml": one("max_attempts: 1", "max_attempts: !custom 1"),
        "yaml_local_tag_mapping.yaml": one("  inputs: {}", "  inputs: !custom {}"),
        "yaml_seq_tag_on_scalar.yaml": one("max_attempts: 1", "max_attempts: !!seq a"),
        "yaml_block_scalar_in_flow.yaml": one("  inputs: {}", "  inputs: {a: |\n    x}"),
        "yaml_undefined_alias.yaml": one("max_attempts: 1", "max_attempts: *nowhere"),
        "yaml_second_document.yaml": base + "---\n",
        "yaml_quoted_continuation.yaml": one("graph_id: g\n", "graph_id: \"g\nx\"\n"),
        "yaml_quoted_continuation_nested.yaml": one("  kind: research_claim", "  kind: \"research\n  claim\""),
        "yaml_quoted_unclosed.yaml": one("graph_id: g\n", "graph_id: 'g\n"),
        "yaml_quoted_document_marker.yaml": one("graph_id: g\n", "graph_id: \"g\n---\nx\"\n"),
        "yaml_directive_version.yaml": "%YAML 2.0\n---\n" + base,
        "yaml_directive_duplicate.yaml": "%YAML 1.1\n%YAML 1.1\n---\n" + base,
        "yaml_directive_ok.yaml": "%YAML 1.1\n---\n" + base,
        "yaml_comment_then_second_document.yaml": "# leading comment\n\n" + base + "---\nx: 1\n",
        "yaml_mapping_value_here.yaml": one("graph_id: g", "graph_id: g: h"),
        "yaml_reserved_character.yaml": one("graph_id: g", "graph_id: @g"),
        "yaml_dash_in_flow.yaml": one("  inputs: {}", "  inputs: [- a]"),
        "yaml_question_mark_in_flow.yaml": one("  inputs: {}", "  inputs: {a?b: c}"),
        "yaml_multiline_key_in_flow.yaml": one("  inputs: {}", "  inputs: {a\n    b: c}"),
        "yaml_sequence_entry_here.yaml": one("graph_id: g", "graph_id: - g"),
        "yaml_missing_colon.yaml": one("graph_id: g\n", "graph_id: g\nstray\n"),
        "yaml_key_indented_less.yaml": one("    max_wallclock_s: 60", "   max_wallclock_s: 60"),
        "yaml_key_indented_more.yaml": one("  kind: research_claim", "   kind: research_claim"),
        "yaml_entry_in_mapping.yaml": one("graph_id: g\n", "graph_id: g\n- x\n"),
        "yaml_key_after_sequence.yaml": "- a\n" + base,
        "yaml_extra_bracket.yaml": one("  inputs: {}", "  inputs: {}}"),
        "yaml_block_scalar_dedent.yaml": one("graph_id: g\n", "graph_id: |\n    g\n  x\n"),
        "yaml_node_key_dedent.yaml": one("  isolation: workspace_only", " isolation: workspace_only"),
        "yaml_long_line_error.yaml": one("graph_id: g", "graph_id: " + "g" * 90 + ": x"),
    })
    files.update(raw)
    for fname, text in sorted(files.items()):
        path = os.path.join(CASES, fname)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        r = subprocess.run([args.reference, "graph", "lint", path, "--json"], capture_output=True, text=True)
        h = subprocess.run([args.reference, "graph", "lint", path], capture_output=True, text=True)
        expected = {"exit": r.returncode, "json": json.loads(r.stdout) if r.stdout.strip() else None,
                    "stderr": h.stderr.replace(path, "<MANIFEST>")}
        with open(path + ".expected", "w", encoding="utf-8") as f:
            f.write(json.dumps(expected, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"{len(files)} cases written to {CASES}")
    plans = os.path.join(HERE, "plans")
    os.makedirs(plans, exist_ok=True)
    all_cases = cases()
    write_packages(plans)
    all_plans = {name: (m, c, []) for name, (m, c) in plan_cases().items()}
    all_plans.update(loop_cases(args.reference, plans))
    for name, (manifest, connections, roots) in sorted(all_plans.items()):
        doc = all_cases[manifest] if isinstance(manifest, str) else manifest
        mpath = os.path.join(plans, name + ".json")
        with open(mpath, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        args_c = []
        if connections is not None:
            cpath = os.path.join(plans, name + ".connections.json")
            with open(cpath, "w", encoding="utf-8") as f:
                f.write(json.dumps(connections, indent=2) + "\n")
            args_c = ["--connections", cpath]
        for root in roots:
            args_c += ["--loop-roots", root]
        out = {"loop_roots": roots} if roots else {}
        for mode in ("json", "human"):
            flag = ["--json"] if mode == "json" else []
            r = subprocess.run([args.reference, "graph", "plan", mpath] + args_c + flag,
                               capture_output=True, text=True, cwd=plans)
            out[mode] = {"exit": r.returncode, "stdout": r.stdout, "stderr": r.stderr.replace(plans + "/", "")}
        with open(mpath + ".expected", "w", encoding="utf-8") as f:
            f.write(json.dumps(out, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"{len(all_plans)} plan cases written to {plans}")

if __name__ == "__main__":
    main()
