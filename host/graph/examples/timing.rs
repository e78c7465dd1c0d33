//! One-shot timing of each stage on generated manifests (a quick look; the
//! criterion bench `compile` is the measurement of record).
#[path = "../benches/compile.rs"]
#[allow(dead_code)]
mod bench;

use std::time::Instant;

fn main() {
    for nodes in [1_000usize, 10_000] {
        let text = bench::manifest(nodes);
        let t = Instant::now();
        let doc = bl_graph::parse::parse_json(&text).unwrap();
        let parsed = t.elapsed();
        let t = Instant::now();
        let graph = bl_graph::validate(&doc).unwrap();
        let validated = t.elapsed();
        let t = Instant::now();
        let levels = bl_graph::plan::kahn_levels(&graph).unwrap();
        let kahn = t.elapsed();
        let t = Instant::now();
        let digest = bl_graph::graph_digest(&graph);
        let digested = t.elapsed();
        let input = bl_graph::CompileInput {
            connections: None,
            available_packages: None,
            policy_digest: bl_graph::plan::DEFAULT_POLICY_DIGEST,
        };
        let t = Instant::now();
        bl_graph::compile(&graph, &input).unwrap();
        let compiled = t.elapsed();
        println!(
            "{nodes} nodes ({} bytes, {} waves): parse {parsed:?}, validate {validated:?}, kahn {kahn:?}, digest {digested:?} ({}), compile {compiled:?}",
            text.len(),
            levels.len(),
            &digest[..15]
        );
    }
}
