//! Lint and plan generated manifests of 1k, 10k and 100k nodes.
//! Target: 10k nodes in under 200 ms, with time growing linearly.
//!
//!     cargo bench -p bl-graph --bench compile

use std::hint::black_box;
use std::time::Duration;

use bl_graph::plan::DEFAULT_POLICY_DIGEST;
use bl_graph::{CompileInput, Format, compile, lint};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;

/// A DAG in which node i reads from i-1 and i/2, so nearly every node has
/// two incoming edges.
pub fn manifest(nodes: usize) -> String {
    let budget = json!({"max_attempts": 1, "max_wallclock_s": 60, "max_tokens": 1000, "max_cost_microunits": 0});
    let node_list: Vec<_> = (0..nodes)
        .map(|i| {
            let inputs = if i == 0 { json!({}) } else { json!({"a": "text", "b": "text"}) };
            json!({"id": format!("n{i}"), "kind": "research_claim", "inputs": inputs, "outputs": {"out": "text"},
                   "budget": budget, "effects": ["workspace_write"], "isolation": "process_restricted"})
        })
        .collect();
    let mut edges = Vec::new();
    for i in 1..nodes {
        edges.push(json!({"from_node": format!("n{}", i - 1), "from_port": "out", "to_node": format!("n{i}"), "to_port": "a"}));
        // A second parent only when it differs from the first: graph/v1
        // (like bounded-loops) reads two edges between one pair as a cycle.
        if i / 2 < i - 1 {
            edges.push(json!({"from_node": format!("n{}", i / 2), "from_port": "out", "to_node": format!("n{i}"), "to_port": "b"}));
        }
    }
    json!({"api_version": "bounded-loops.dev/graph/v1", "graph_id": "bench", "version": "1.0.0",
           "nodes": node_list, "edges": edges, "connection_slots": [],
           "policies": {"data_class": "internal", "fail_mode": "fail_closed"}})
    .to_string()
}

fn lint_and_plan(text: &str) -> String {
    let graph = lint(text, Format::Json).expect("valid");
    let input = CompileInput {
        connections: None,
        available_packages: None,
        policy_digest: DEFAULT_POLICY_DIGEST,
    };
    compile(&graph, &input).expect("compiles").plan_id
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("lint+plan");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(1));
    for nodes in [1_000usize, 10_000, 100_000] {
        let text = manifest(nodes);
        group.throughput(Throughput::Elements(nodes as u64));
        group.bench_with_input(BenchmarkId::from_parameter(nodes), &text, |b, text| {
            b.iter(|| lint_and_plan(black_box(text)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
