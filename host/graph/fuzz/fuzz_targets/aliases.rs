//! YAML documents built from nested anchors and aliases, shaped by the
//! fuzzer's bytes: lint must answer (a graph or a refusal) without the
//! document's expansion growing past bl's node limit, however the aliases
//! nest. Run with a memory cap (`-rss_limit_mb=512`) to catch a bomb.
#![no_main]

use bl_graph::{Format, lint};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Each byte adds one level: a sequence of `width` aliases of the level
    // below (width 1..=16), anchored for the next.
    let mut text = String::from("a0: &a0 [x]\n");
    for (level, byte) in data.iter().take(64).enumerate() {
        let width = (*byte as usize % 16) + 1;
        let below = format!("*a{level}");
        let items = vec![below.as_str(); width].join(", ");
        text.push_str(&format!("a{}: &a{} [{items}]\n", level + 1, level + 1));
    }
    let _ = lint(&text, Format::Yaml);
});
