//! `panel.anonymize@v1`: the reference transform of seed 002.
//!
//! 1. Accepts many report inputs named `lens-*.md`.
//! 2. Orders them by a keyed hash of the host's seed (derived from the run
//!    id and the input digests) and each input's digest: a shuffle that is
//!    the same on every re-run of the same inputs.
//! 3. Scrubs known source markers (front matter, HTML comments, `Lens:` /
//!    `Source:` / `Author:` / `Model:` / `Agent:` / `Reviewer:` lines, the
//!    lens's file name and id, and configured extra markers) and emits
//!    `Response A` … `Response N` in one markdown bundle.
//! 4. Writes the label map (response → input and digest) to an output that
//!    must be declared `system-only`; it refuses to run otherwise, so the
//!    map can never reach an agent.
//!
//! The same inputs, seed and config always give byte-identical outputs.

use bl_plugin_sdk::{Inputs, Outputs, PluginError, Transform, TransformReport, Visibility};
use serde::Deserialize;
use serde_json::{Map, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub responses: String,
    pub label_map: String,
    pub markers: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            responses: "panel-responses.md".into(),
            label_map: "panel-label-map.json".into(),
            markers: Vec::new(),
        }
    }
}

const REDACTED: &str = "[redacted]";
const MARKER_KEYS: &[&str] = &[
    "lens:",
    "source:",
    "author:",
    "model:",
    "agent:",
    "reviewer:",
];

/// `A`, `B`, … `Z`, `AA`, `AB`, …
pub fn label(mut index: usize) -> String {
    let mut letters = Vec::new();
    loop {
        letters.push(b'A' + (index % 26) as u8);
        if index < 26 {
            break;
        }
        index = index / 26 - 1;
    }
    letters.reverse();
    String::from_utf8(letters).expect("ASCII letters")
}

/// The lens id of `reports/lens-security.md`: `security`.
fn lens_id(name: &str) -> Option<&str> {
    let base = name.rsplit('/').next().unwrap_or(name);
    base.strip_prefix("lens-")?
        .strip_suffix(".md")
        .filter(|id| !id.is_empty())
}

/// Replaces every ASCII-case-insensitive occurrence of `needle`.
fn replace_ignoring_case(text: &str, needle: &str, with: &str) -> String {
    if needle.is_empty() {
        return text.to_string();
    }
    let (hay, pat) = (text.to_ascii_lowercase(), needle.to_ascii_lowercase());
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (at, _) in hay.match_indices(&pat) {
        if at < last {
            continue;
        }
        out.push_str(&text[last..at]);
        out.push_str(with);
        last = at + pat.len();
    }
    out.push_str(&text[last..]);
    out
}

pub fn scrub(text: &str, id: &str, extra: &[String]) -> String {
    let mut body = text.replace("\r\n", "\n");
    // Front matter carries who wrote the report.
    if let Some(rest) = body.strip_prefix("---\n")
        && let Some(end) = rest.find("\n---\n")
    {
        body = rest[end + 5..].to_string();
    }
    // HTML comments are where generators leave provenance.
    while let Some(start) = body.find("<!--") {
        match body[start..].find("-->") {
            Some(len) => body.replace_range(start..start + len + 3, ""),
            None => body.truncate(start),
        }
    }
    let mut kept: Vec<&str> = Vec::new();
    for line in body.lines() {
        let lower = line
            .trim_start()
            .trim_start_matches(['*', '_', '#', ' '])
            .to_ascii_lowercase();
        if !MARKER_KEYS.iter().any(|k| lower.starts_with(k)) {
            kept.push(line);
        }
    }
    let mut body = kept.join("\n");
    let mut markers = vec![
        format!("lens-{id}.md"),
        format!("lens-{id}"),
        format!("{id} lens"),
    ];
    markers.extend(extra.iter().cloned());
    for marker in &markers {
        body = replace_ignoring_case(&body, marker, REDACTED);
    }
    body.trim().to_string()
}

fn sort_key(seed: &[u8], digest: &str, name: &str) -> String {
    let mut material = seed.to_vec();
    material.extend_from_slice(digest.as_bytes());
    material.push(0);
    material.extend_from_slice(name.as_bytes());
    bl_plugin_sdk::digest(&material)
}

pub struct PanelAnonymize;

impl Transform for PanelAnonymize {
    type Config = Config;

    fn run(
        inputs: &dyn Inputs,
        outputs: &mut dyn Outputs,
        seed: &[u8],
        config: Config,
    ) -> Result<TransformReport, PluginError> {
        let declared = outputs.declared();
        let visibility_of = |name: &str| {
            declared
                .iter()
                .find(|d| d.name == name)
                .map(|d| d.visibility)
        };
        match visibility_of(&config.label_map) {
            Some(Visibility::SystemOnly) => {}
            Some(Visibility::Consumer) => {
                return Err(PluginError::BadConfig(format!(
                    "the label map output `{}` is declared with consumer visibility; declare it system_only",
                    config.label_map
                )));
            }
            None => {
                return Err(PluginError::BadConfig(format!(
                    "no declared output `{}` for the label map",
                    config.label_map
                )));
            }
        }
        if visibility_of(&config.responses).is_none() {
            return Err(PluginError::BadConfig(format!(
                "no declared output `{}` for the responses",
                config.responses
            )));
        }

        let mut reports = Vec::new();
        for info in inputs.entries() {
            let Some(id) = lens_id(&info.name).map(str::to_string) else {
                return Err(PluginError::BadConfig(format!(
                    "input `{}` is not a lens-*.md report",
                    info.name
                )));
            };
            let bytes = inputs.read(&info.name)?;
            let text = String::from_utf8(bytes).map_err(|_| {
                PluginError::Internal(format!("input `{}` is not UTF-8", info.name))
            })?;
            reports.push((sort_key(seed, &info.digest, &info.name), info, id, text));
        }
        if reports.is_empty() {
            return Err(PluginError::BadConfig(
                "no lens-*.md inputs were bound".into(),
            ));
        }
        reports.sort_by(|a, b| a.0.cmp(&b.0));

        let mut bundle = String::from("# Panel responses\n");
        let mut labels = Map::new();
        for (index, (_, info, id, text)) in reports.iter().enumerate() {
            let name = format!("Response {}", label(index));
            bundle.push_str(&format!(
                "\n## {name}\n\n{}\n",
                scrub(text, id, &config.markers)
            ));
            labels.insert(name, json!({ "input": info.name, "digest": info.digest }));
        }
        let map = json!({ "schema": "bl.panel-label-map/v1", "labels": labels });
        let map_text = serde_json::to_string_pretty(&map).expect("a map serializes") + "\n";
        outputs.write(&config.responses, bundle.as_bytes())?;
        outputs.write(&config.label_map, map_text.as_bytes())?;
        Ok(TransformReport {
            summary: format!("anonymized {} reports", reports.len()),
        })
    }
}

bl_plugin_sdk::export_transform!(PanelAnonymize);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::testing::{NativeInputs, NativeOutputs};
    use serde_json::Value;

    fn inputs() -> NativeInputs {
        NativeInputs::new()
            .with("lens-security.md", "text/markdown", b"---\nauthor: sec-bot\n---\n# Security lens\nLens: security\nThe security lens found an injection. <!-- model: x -->\n")
            .with("lens-perf.md", "text/markdown", b"Perf is fine; see lens-perf.md.\n")
            .with("lens-style.md", "text/markdown", b"Style: OK\n")
    }

    fn outputs() -> NativeOutputs {
        NativeOutputs::new()
            .declare("panel-responses.md", "text/markdown", Visibility::Consumer)
            .declare(
                "panel-label-map.json",
                "application/json",
                Visibility::SystemOnly,
            )
    }

    fn run(seed: &[u8]) -> NativeOutputs {
        let mut out = outputs();
        bl_plugin_sdk::run_transform::<PanelAnonymize>(&inputs(), &mut out, seed, "{}").unwrap();
        out
    }

    #[test]
    fn scrubs_markers_and_labels_responses() {
        let out = run(b"seed-1");
        let bundle = String::from_utf8(out.written["panel-responses.md"].clone()).unwrap();
        for leak in ["sec-bot", "Lens:", "security lens", "lens-perf", "model: x"] {
            assert!(
                !bundle.to_lowercase().contains(&leak.to_lowercase()),
                "{leak} leaked:\n{bundle}"
            );
        }
        for l in ["## Response A", "## Response B", "## Response C"] {
            assert!(bundle.contains(l), "{bundle}");
        }
        let map: Value = serde_json::from_slice(&out.written["panel-label-map.json"]).unwrap();
        assert_eq!(map["labels"].as_object().unwrap().len(), 3);
    }

    #[test]
    fn the_same_seed_gives_identical_bytes_and_another_seed_may_reorder() {
        assert_eq!(run(b"seed-1").written, run(b"seed-1").written);
        let orders: std::collections::BTreeSet<Vec<u8>> = (0..16u8)
            .map(|i| run(&[i]).written["panel-label-map.json"].clone())
            .collect();
        assert!(orders.len() > 1, "the seed never changed the order");
    }

    #[test]
    fn refuses_a_label_map_an_agent_could_read() {
        let mut out = NativeOutputs::new()
            .declare("panel-responses.md", "text/markdown", Visibility::Consumer)
            .declare(
                "panel-label-map.json",
                "application/json",
                Visibility::Consumer,
            );
        let err = bl_plugin_sdk::run_transform::<PanelAnonymize>(&inputs(), &mut out, b"s", "{}")
            .unwrap_err();
        assert!(
            matches!(err, PluginError::BadConfig(ref m) if m.contains("system_only")),
            "{err:?}"
        );
    }

    #[test]
    fn labels_go_past_z() {
        assert_eq!(label(0), "A");
        assert_eq!(label(25), "Z");
        assert_eq!(label(26), "AA");
    }
}
