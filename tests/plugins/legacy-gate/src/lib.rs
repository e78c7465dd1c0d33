//! A gate written with plain wit-bindgen (no SDK) against bl:plugin 1.0.0:
//! passes when `marker.txt` exists.

wit_bindgen::generate!({
    path: "../wit-1.0.0",
    world: "gate",
});

struct Legacy;

impl Guest for Legacy {
    fn check(root: &Dir, _config: String) -> Result<Verdict, PluginError> {
        let found = root
            .stat("marker.txt")
            .map_err(|e| PluginError::Capability(format!("{e:?}")))?;
        Ok(Verdict {
            passed: found.is_some(),
            summary: format!(
                "legacy 1.0.0 gate: marker.txt present = {}",
                found.is_some()
            ),
            findings: Vec::new(),
            evidence_digest: None,
        })
    }
}

export!(Legacy);
