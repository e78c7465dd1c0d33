//! bl's lint against the recorded outputs of bounded-loops 0.7.6 for every
//! manifest in tests/corpus/graph/cases (see generate.py there).

use std::path::{Path, PathBuf};

use bl_graph::{Format, graph_digest, lint};
use serde_json::Value;

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/graph/cases")
}

#[test]
fn lint_matches_the_reference_on_every_case() {
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("corpus directory")
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with(".expected"))
        .collect();
    entries.sort();
    for path in entries {
        let Some(format) = Format::from_path(&path) else {
            continue;
        };
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{}.expected", path.display())).unwrap(),
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        checked += 1;
        let want = &expected["json"];
        match (lint(&text, format), expected["exit"].as_i64()) {
            (Ok(graph), Some(0)) => {
                let got = serde_json::json!({
                    "digest": graph_digest(&graph),
                    "edge_count": graph.edges.len(),
                    "node_ids": graph.nodes.iter().map(|n| n.id.clone()).collect::<Vec<_>>(),
                    "schema_version": 1,
                    "slot_ids": graph.slots.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
                    "valid": true,
                });
                if &got != want {
                    failures.push(format!("{name}: got {got}\n   want {want}"));
                }
            }
            (Err(refusal), Some(2)) => {
                let code_ok =
                    want["code"] == refusal.code && want["pointer"] == refusal.pointer.as_str();
                let message_ok = want["message"] == refusal.message.as_str();
                if !(code_ok && message_ok) {
                    failures.push(format!(
                        "{name}: got [{}] {} — {}\n   want [{}] {} — {}",
                        refusal.code,
                        refusal.pointer,
                        refusal.message,
                        want["code"],
                        want["pointer"],
                        want["message"]
                    ));
                }
            }
            (Ok(_), _) => failures.push(format!(
                "{name}: accepted, but the reference refused it: {want}"
            )),
            (Err(r), _) => failures.push(format!(
                "{name}: refused [{}] {} — {}, but the reference accepted it",
                r.code, r.pointer, r.message
            )),
        }
    }
    assert!(checked > 100, "only {checked} cases found");
    assert!(
        failures.is_empty(),
        "{} of {checked} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// YAML written from any manifest that parses reads back to the same
/// values, and lints to the same digest or the same refusal code.
#[test]
fn yaml_written_from_every_case_reads_back_the_same() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(cases_dir()).expect("corpus directory") {
        let path = entry.unwrap().path();
        let Some(format) = Format::from_path(&path) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let Ok(doc) = bl_graph::parse_document(&text, format) else {
            continue;
        };
        checked += 1;
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let yaml = bl_graph::yaml::to_yaml(&doc);
        match bl_graph::yaml::parse_yaml(&yaml) {
            Ok(again) if again.to_json() == doc.to_json() => {}
            Ok(again) => failures.push(format!(
                "{name}: read back as {}\n   not {}\n{yaml}",
                again.to_json(),
                doc.to_json()
            )),
            Err(e) => failures.push(format!("{name}: the YAML is refused: {e}\n{yaml}")),
        }
        let before = lint(&text, format).map(|g| graph_digest(&g));
        let after = lint(&yaml, Format::Yaml).map(|g| graph_digest(&g));
        match (before, after) {
            (Ok(a), Ok(b)) if a == b => {}
            (Err(a), Err(b)) if a.code == b.code => {}
            (a, b) => failures.push(format!(
                "{name}: lint differs after writing YAML: {:?} then {:?}",
                a.map_err(|r| r.code),
                b.map_err(|r| r.code)
            )),
        }
    }
    assert!(checked > 100, "only {checked} cases parsed");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// bounded-loops' words for a bad edge port name neither the node nor the
/// port; bl's hints beneath them do, with what there is.
#[test]
fn a_bad_edge_port_is_named_with_what_the_node_has() {
    let hints = |case: &str| {
        let text = std::fs::read_to_string(cases_dir().join(case)).unwrap();
        lint(&text, Format::Json).unwrap_err().hints
    };
    assert_eq!(
        hints("missing_input_port.json"),
        [
            "node 'write' has no input 'zzz' (its inputs: doc): name one of them, or declare 'zzz' under its inputs with the type of fetch.doc (text)"
        ]
    );
    assert_eq!(
        hints("missing_output_port.json"),
        ["node 'fetch' has no output 'zzz' (its outputs: doc)"]
    );
    assert_eq!(
        hints("port_type_mismatch.json"),
        ["a.x is text, and b.x is json: give both the same type"]
    );
}
