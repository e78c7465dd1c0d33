//! Any bytes, read as a JSON or a YAML manifest: lint must return a verdict
//! (and a valid graph must compile) without panicking.
#![no_main]

use bl_graph::plan::DEFAULT_POLICY_DIGEST;
use bl_graph::{CompileInput, Format, compile, lint};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for format in [Format::Json, Format::Yaml] {
        if let Ok(graph) = lint(text, format) {
            let input = CompileInput { connections: None, available_packages: None, policy_digest: DEFAULT_POLICY_DIGEST };
            let _ = compile(&graph, &input);
        }
    }
});
