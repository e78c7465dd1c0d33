//! bl's artifact-ports extension: the reference example lints, and each
//! compile-time rule of seed 002 refuses what it must.

use bl_graph::{Format, graph_digest, lint};

const EXAMPLE: &str = include_str!("../../../examples/graphs/refactor-audit.yaml");

fn refusal(text: &str) -> (&'static str, String) {
    let r = lint(text, Format::Yaml).expect_err("must be refused");
    (r.code.as_str(), r.pointer)
}

#[test]
fn the_reference_example_lints_and_digests_its_extension_fields() {
    let graph = lint(EXAMPLE, Format::Yaml).unwrap();
    let panel = graph.node("anonymize-panel").unwrap();
    assert!(panel.is_transform());
    assert_eq!(panel.artifact_ports.len(), 4);
    // The extension fields are part of what the digest covers.
    let moved = EXAMPLE.replace("workspace/panel.md", "workspace/panel2.md");
    assert_ne!(
        graph_digest(&graph),
        graph_digest(&lint(&moved, Format::Yaml).unwrap())
    );
}

#[test]
fn long_form_ports_need_the_extension() {
    let plain = EXAMPLE.replace("extensions: [artifact-ports]\n", "");
    assert_eq!(refusal(&plain), ("unknown_field", "/nodes/0".into()));
    let unknown = EXAMPLE.replace("[artifact-ports]", "[time-travel]");
    assert_eq!(refusal(&unknown), ("extension", "/extensions/0".into()));
}

#[test]
fn system_only_outputs_reach_transforms_only() {
    let leak = EXAMPLE.replace(
        "  - {from_node: anonymize-panel, from_port: panel_responses,",
        "  - {from_node: anonymize-panel, from_port: label_map, to_node: synthesizer, to_port: labels}\n  - {from_node: anonymize-panel, from_port: panel_responses,",
    )
    .replace("      panel_reports: {type: markdown}\n", "      panel_reports: {type: markdown}\n      labels: {type: json}\n");
    assert_eq!(refusal(&leak), ("visibility", "/edges/2".into()));
}

#[test]
fn an_output_path_has_one_owner() {
    let twice = EXAMPLE.replace(
        "workspace/lens-performance.md",
        "workspace/lens-security.md",
    );
    assert_eq!(
        refusal(&twice),
        (
            "output_path_conflict",
            "/nodes/1/outputs/report/path".into()
        )
    );
}

#[test]
fn ledger_paths_are_reserved() {
    let manifests = EXAMPLE.replace("workspace/panel.md", "workspace/manifests/panel.md");
    assert_eq!(
        refusal(&manifests),
        (
            "reserved_path",
            "/nodes/2/outputs/panel_responses/path".into()
        )
    );
    let system = EXAMPLE.replace("workspace/panel.md", "workspace/system/panel.md");
    assert_eq!(
        refusal(&system),
        (
            "reserved_path",
            "/nodes/2/outputs/panel_responses/path".into()
        )
    );
    let escape = EXAMPLE.replace("workspace/panel.md", "workspace/../../panel.md");
    assert_eq!(
        refusal(&escape),
        (
            "reserved_path",
            "/nodes/2/outputs/panel_responses/path".into()
        )
    );
}

#[test]
fn required_inputs_need_a_producer() {
    let unbound = EXAMPLE.replace(
        "      panel_reports: {type: markdown}\n",
        "      panel_reports: {type: markdown}\n      notes: {type: markdown}\n",
    );
    assert_eq!(
        refusal(&unbound),
        ("input_unbound", "/nodes/3/inputs/notes".into())
    );
    let optional = unbound.replace(
        "notes: {type: markdown}",
        "notes: {type: markdown, required: false}",
    );
    assert!(lint(&optional, Format::Yaml).is_ok());
}

#[test]
fn an_artifact_input_needs_a_published_file() {
    let no_path = EXAMPLE.replace(
        "report: {type: markdown, path: workspace/lens-security.md}",
        "report: markdown",
    );
    assert_eq!(refusal(&no_path), ("artifact_handoff", "/edges/0".into()));
}

#[test]
fn a_port_is_an_input_or_an_output_not_both() {
    let dup = EXAMPLE.replace(
        "      panel_responses: {type: markdown, path: workspace/panel.md}\n",
        "      panel_responses: {type: markdown, path: workspace/panel.md}\n      security: {type: markdown, path: workspace/security.md}\n",
    );
    assert_eq!(refusal(&dup).0, "port_duplicate");
}

#[test]
fn the_reference_example_plans_in_waves() {
    let graph = lint(EXAMPLE, Format::Yaml).unwrap();
    let input = bl_graph::CompileInput {
        connections: None,
        available_packages: None,
        policy_digest: bl_graph::plan::DEFAULT_POLICY_DIGEST,
    };
    let plan = bl_graph::compile(&graph, &input).unwrap();
    assert_eq!(
        plan.levels,
        vec![
            vec!["lens-performance", "lens-security"],
            vec!["anonymize-panel"],
            vec!["synthesizer"]
        ]
    );
    assert_eq!(plan.bound.total(), 6);
}

#[test]
fn two_ports_between_one_pair_of_nodes_are_fine_with_the_extension() {
    let two = EXAMPLE
        .replace(
            "      panel_reports: {type: markdown}\n",
            "      panel_reports: {type: markdown}\n      panel_copy: {type: markdown}\n",
        )
        .replace(
            "edges:\n",
            "edges:\n  - {from_node: anonymize-panel, from_port: panel_responses, to_node: synthesizer, to_port: panel_copy}\n",
        );
    let graph = lint(&two, Format::Yaml).unwrap();
    assert_eq!(graph.edges.len(), 4);
}

#[test]
fn outputs_lie_under_the_run_workspace() {
    // Outputs are published into the run directory at their path: one
    // outside workspace/ could overwrite the ledger's own records.
    for path in [
        "recorded-decisions.json",
        "controller-events.jsonl",
        "panel.md",
    ] {
        let outside = EXAMPLE.replace("workspace/panel.md", path);
        let (code, pointer) = refusal(&outside);
        assert_eq!(
            (code, pointer.as_str()),
            ("reserved_path", "/nodes/2/outputs/panel_responses/path"),
            "{path}"
        );
    }
}

#[test]
fn an_artifact_handoff_carries_no_guard() {
    let guarded = EXAMPLE
        .replace(
            "to_node: anonymize-panel, to_port: security}",
            "to_node: anonymize-panel, to_port: security, when: terminal}",
        )
        .replace("fail_mode: fail_closed", "fail_mode: continue_declared");
    assert_eq!(
        refusal(&guarded),
        ("artifact_handoff", "/edges/0/when".into())
    );
}

/// A join writes no file: an output path on it, or an artifact input fed
/// from it, is refused before anything runs, with the fix (edges straight
/// from the writers), not after every producer has run.
#[test]
fn a_join_hands_on_no_file() {
    let join = "  - id: gather\n    kind: join\n    mode: all_successful\n    inputs:\n      security: {type: markdown}\n    outputs:\n      bundle: {type: markdown, path: workspace/bundle.md}\n    budget: {max_attempts: 1, max_wallclock_s: 60, max_tokens: 1, max_cost_microunits: 0}\n    effects: [read_only]\n    isolation: workspace_only\n  - id: synthesizer\n";
    let through_join = EXAMPLE
        .replace("  - id: synthesizer\n", join)
        .replace(
            "  - {from_node: lens-security, from_port: report, to_node: anonymize-panel, to_port: security}\n",
            "  - {from_node: lens-security, from_port: report, to_node: anonymize-panel, to_port: security}\n  - {from_node: lens-security, from_port: report, to_node: gather, to_port: security}\n",
        );
    let refused = lint(&through_join, Format::Yaml).unwrap_err();
    assert_eq!(
        (refused.code.as_str(), refused.pointer.as_str()),
        ("artifact_handoff", "/nodes/3/outputs/bundle/path")
    );
    assert!(
        refused
            .message
            .contains("gather.bundle would never be published: node 'gather' is a join")
            && refused.message.contains("a join there only waits for them"),
        "{}",
        refused.message
    );
    // Declared without a path, and read by the synthesizer: the edge is
    // refused with the same fix.
    let read = through_join
        .replace(
            "      bundle: {type: markdown, path: workspace/bundle.md}\n",
            "      bundle: markdown\n",
        )
        .replace(
            "  - {from_node: anonymize-panel, from_port: panel_responses,",
            "  - {from_node: gather, from_port: bundle, to_node: synthesizer, to_port: bundle}\n  - {from_node: anonymize-panel, from_port: panel_responses,",
        )
        .replace(
            "      panel_reports: {type: markdown}\n",
            "      panel_reports: {type: markdown}\n      bundle: {type: markdown}\n",
        );
    let refused = lint(&read, Format::Yaml).unwrap_err();
    assert_eq!(refused.code.as_str(), "artifact_handoff");
    assert!(
        refused.message.contains("'gather' is a join")
            && refused
                .message
                .contains("hand 'synthesizer' the files straight from the nodes that write them"),
        "{}",
        refused.message
    );
}
