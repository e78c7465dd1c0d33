//! The studio: a manifest drawn, edited and linted as it is typed. The
//! lint is bl-graph itself, compiled to wasm and embedded in the page, so
//! it answers exactly as `bl graph lint` does. [`studio_report`] is what
//! that wasm answers for each keystroke; [`studio_html`] is the page.

use base64::Engine as _;
use bl_graph::model::Named;
use bl_graph::{Format, Graph};
use serde_json::{Value, json};

use crate::arena::{STYLE, csp_hash, drawing, escape, head};
use crate::layout::layout;

const SCRIPT: &str = include_str!("studio.js");

/// What the studio shows for manifest text: `bl graph lint --json`'s own
/// object under `lint` (a refusal with its line and column, or the valid
/// graph's summary); for a valid graph also the drawing, the warnings
/// `bl graph lint` prints (each with its place), and the dry run: the
/// approvals the graph would wait on and the effects it would have on the
/// world, each with the approvals that come before it.
pub fn studio_report(text: &str, format: Format) -> Value {
    studio_report_cached(text, format, &mut LayoutCache::default())
}

/// The last graph's shape and where its nodes went, and its drawing: a
/// keystroke that changes no node and no edge is neither laid out nor
/// drawn again (the layout, then the drawing, are most of the time a
/// large graph takes).
#[derive(Debug, Default)]
pub struct LayoutCache {
    last: Option<Laid>,
    drawn: Option<Drawn>,
    /// How many drawings this cache has made: each one's number.
    drawings: u32,
}

/// What a drawing shows (each node's id and kind, each edge and its
/// condition), the drawing, and its number in its cache.
#[derive(Debug)]
struct Drawn {
    ids: Vec<String>,
    kinds: Vec<&'static str>,
    edges: Vec<(usize, usize, Option<&'static str>)>,
    svg: String,
    number: u32,
}

/// A graph's shape (its node count and edges) and where its nodes went.
#[derive(Debug)]
struct Laid {
    count: usize,
    edges: Vec<(usize, usize)>,
    layout: crate::Layout,
}

impl LayoutCache {
    fn layout(&mut self, count: usize, edges: Vec<(usize, usize)>) -> &crate::Layout {
        let same = matches!(&self.last, Some(l) if l.count == count && l.edges == edges);
        if !same {
            let layout = layout(count, &edges);
            self.last = Some(Laid {
                count,
                edges,
                layout,
            });
        }
        &self.last.as_ref().expect("laid out just above").layout
    }
}

/// [`studio_report`], reusing the layout in `cache` when the graph's shape
/// is the one it holds.
pub fn studio_report_cached(text: &str, format: Format, cache: &mut LayoutCache) -> Value {
    studio_report_since(text, format, cache, None)
}

/// [`studio_report_cached`] for a page that shows the drawing numbered
/// `shown` (the report's `drawing`, which names each drawing `cache`
/// makes): when the graph's drawing is still that one, `svg` is null and
/// the page keeps what it shows. A keystroke then moves no drawing (a
/// large graph's is hundreds of kilobytes) from the linter to the page.
pub fn studio_report_since(
    text: &str,
    format: Format,
    cache: &mut LayoutCache,
    shown: Option<u32>,
) -> Value {
    let graph = match bl_graph::lint(text, format) {
        Ok(graph) => graph,
        Err(refusal) => return json!({ "lint": bl_graph::report::refusal_json(&refusal) }),
    };
    let warnings: Vec<Value> = bl_graph::hazards::hazards(&graph, None)
        .into_iter()
        .map(|h| {
            let pos = bl_graph::locate(text, format, &h.pointer);
            json!({
                "rule": h.rule, "node": h.node, "pointer": h.pointer, "message": h.message,
                "line": pos.map(|p| p.line), "column": pos.map(|p| p.col),
            })
        })
        .collect();
    let drawn = draw(&graph, cache);
    let svg = (shown != Some(drawn.number)).then(|| drawn.svg.clone());
    json!({
        "lint": bl_graph::report::lint_json(&graph),
        "svg": svg,
        "drawing": drawn.number,
        "warnings": warnings,
        "dry_run": bl_graph::report::dry_run(&graph),
    })
}

/// The manifest as YAML: YAML text as it is, JSON written as YAML that
/// lints the same. `None` when the text does not parse.
pub fn studio_yaml(text: &str, format: Format) -> Option<String> {
    match format {
        Format::Yaml => Some(text.to_string()),
        Format::Json => bl_graph::parse_document(text, format)
            .ok()
            .map(|doc| bl_graph::yaml::to_yaml(&doc)),
    }
}

fn draw<'c>(graph: &Graph, cache: &'c mut LayoutCache) -> &'c Drawn {
    let at: std::collections::HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    let edges: Vec<(usize, usize, Option<&'static str>)> = graph
        .edges
        .iter()
        .filter_map(|e| {
            Some((
                *at.get(e.from_node.as_str())?,
                *at.get(e.to_node.as_str())?,
                e.when.map(|w| w.name()),
            ))
        })
        .collect();
    let kinds: Vec<&'static str> = graph.nodes.iter().map(|n| n.kind.name()).collect();
    let unchanged = cache.drawn.as_ref().is_some_and(|d| {
        d.kinds == kinds && d.edges == edges && d.ids.iter().eq(graph.nodes.iter().map(|n| &n.id))
    });
    if !unchanged {
        let ids: Vec<&str> = graph.nodes.iter().map(|n| n.id.as_str()).collect();
        let pairs: Vec<(usize, usize)> = edges.iter().map(|&(a, b, _)| (a, b)).collect();
        let svg = drawing(&ids, &kinds, &edges, cache.layout(ids.len(), pairs));
        cache.drawings += 1;
        cache.drawn = Some(Drawn {
            ids: ids.iter().map(|id| id.to_string()).collect(),
            kinds,
            edges,
            svg,
            number: cache.drawings,
        });
    }
    cache.drawn.as_ref().expect("drawn just above")
}

/// The studio page: `manifest` in the editor (named `file_name`, which
/// also says its format), and the linter module, inline.
pub fn studio_html(file_name: &str, manifest: &str, format: Format, linter: &[u8]) -> String {
    let data = json!({
        "file": file_name,
        "format": match format { Format::Json => "json", Format::Yaml => "yaml" },
        "manifest": manifest,
        "linter": base64::engine::general_purpose::STANDARD.encode(linter),
    })
    .to_string()
    .replace('<', "\\u003c");
    // Compiling the embedded linter is the one thing the page evaluates
    // beyond its own script; it fetches nothing.
    let csp = format!(
        "default-src 'none'; script-src '{}' 'wasm-unsafe-eval'; style-src '{}'; img-src data:; base-uri 'none'; form-action 'none'",
        csp_hash(SCRIPT),
        csp_hash(STYLE)
    );
    format!(
        r#"{head}<header>
<h1>bl studio <span class="run">{title}</span></h1>
<p id="verdict" class="checking" aria-live="polite">Loading the linter…</p>
</header>
<main class="studio">
<section id="editor" aria-label="the manifest"><div class="toolbar"><label>Format <select id="format"><option value="yaml">YAML</option><option value="json">JSON</option></select></label> <button id="export" type="button">Export YAML</button> <span id="took"></span></div><div class="editor"><pre id="gutter" aria-hidden="true"></pre><div class="field"><pre id="backdrop" aria-hidden="true"></pre><textarea id="text" spellcheck="false" autocomplete="off" aria-label="manifest text"></textarea></div></div><ul id="warnings"></ul></section>
<section id="drawn" aria-label="the graph"><div id="graph"></div><h2>Dry run</h2><div id="dryrun"></div></section>
</main>
<script type="application/json" id="bl-studio">{data}</script>
<script>{SCRIPT}</script>
</body>
</html>
"#,
        head = head("studio", file_name, &csp),
        title = escape(file_name),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRAPH: &str = include_str!("../../../tests/corpus/graph/cases/valid_all_kinds_yaml.yaml");

    #[test]
    fn a_valid_graph_is_drawn_and_its_dry_run_names_what_it_would_wait_on_and_do() {
        let report = studio_report(GRAPH, Format::Yaml);
        assert_eq!(report["lint"]["valid"], true, "{report}");
        let svg = report["svg"].as_str().unwrap();
        assert!(svg.contains(r#"data-node="pub""#) && svg.contains(">publish</text>"));
        assert_eq!(report["dry_run"]["approvals"][0]["node"], "ok");
        assert_eq!(report["dry_run"]["effects"][0]["node"], "pub");
        assert_eq!(
            report["dry_run"]["effects"][0]["after_approvals"],
            json!(["ok"])
        );
    }

    #[test]
    fn a_keystroke_that_changes_no_node_or_edge_gets_the_same_drawing_and_one_that_does_a_new_one()
    {
        let mut cache = LayoutCache::default();
        let first = studio_report_cached(GRAPH, Format::Yaml, &mut cache);
        // A trailing space, then back: the drawing is the one made first.
        for text in [format!("{GRAPH} "), GRAPH.to_string()] {
            let again = studio_report_cached(&text, Format::Yaml, &mut cache);
            assert_eq!(again["svg"], first["svg"]);
        }
        // A node renamed (the shape unchanged): drawn again, as a fresh
        // cache draws it.
        let renamed = GRAPH
            .replacen("- id: claim", "- id: claim2", 1)
            .replace("from_node: claim", "from_node: claim2")
            .replace("to_node: claim", "to_node: claim2");
        let fresh = studio_report(&renamed, Format::Yaml);
        assert_eq!(fresh["lint"]["valid"], true, "{fresh}");
        let cached = studio_report_cached(&renamed, Format::Yaml, &mut cache);
        assert_ne!(cached["svg"], first["svg"]);
        assert_eq!(cached["svg"], fresh["svg"]);

        // A page that shows the latest drawing is sent none; one that
        // shows another (an older one) is sent it whole.
        let latest = cached["drawing"].as_u64().unwrap() as u32;
        let kept = studio_report_since(&renamed, Format::Yaml, &mut cache, Some(latest));
        assert!(kept["svg"].is_null() && kept["drawing"] == latest, "{kept}");
        let older = first["drawing"].as_u64().unwrap() as u32;
        assert_ne!(older, latest);
        let sent = studio_report_since(&renamed, Format::Yaml, &mut cache, Some(older));
        assert_eq!(sent["svg"], fresh["svg"]);
    }

    #[test]
    fn a_refusal_is_lints_own_object_with_its_place() {
        let broken = GRAPH.replace("kind: approval", "kind: approvl");
        let line = 1 + GRAPH[..GRAPH.find("kind: approval").unwrap()]
            .matches('\n')
            .count();
        let report = studio_report(&broken, Format::Yaml);
        let want =
            bl_graph::report::refusal_json(&bl_graph::lint(&broken, Format::Yaml).unwrap_err());
        assert_eq!(report["lint"], want);
        assert_eq!(report["lint"]["line"], line, "{report}");
    }

    #[test]
    fn json_is_exported_as_yaml_that_lints_the_same() {
        let graph = bl_graph::lint(GRAPH, Format::Yaml).unwrap();
        let json_text = bl_graph::parse_document(GRAPH, Format::Yaml)
            .unwrap()
            .to_json()
            .to_string();
        let yaml = studio_yaml(&json_text, Format::Json).unwrap();
        let again = bl_graph::lint(&yaml, Format::Yaml).unwrap();
        assert_eq!(
            bl_graph::graph_digest(&graph),
            bl_graph::graph_digest(&again)
        );
    }

    #[test]
    fn the_page_holds_the_linter_and_allows_only_its_script_and_compiling_it() {
        let page = studio_html("g.yaml", "x: </script>", Format::Yaml, b"\0asm");
        assert!(page.contains("'wasm-unsafe-eval'"));
        assert!(page.contains(&csp_hash(SCRIPT)));
        assert_eq!(page.matches("</script>").count(), 2);
        assert!(page.contains("AGFzbQ=="), "the module, inline");
    }
}
