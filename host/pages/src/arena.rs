//! A graph run's arena: the DAG laid out and drawn as SVG, each node's
//! state, attempts, spend, artifacts and events a click away, and the
//! event log, paged. The page trusts nothing it was handed: in the
//! browser (WebCrypto) it hashes every event line into the RFC 6962 tree,
//! compares the root with the run's checkpoint, checks the checkpoint's
//! Ed25519 signature against the verifier key it was given, and checks
//! the plan's digest; only then does it colour the nodes and say
//! "Verified". Anything short of that says LOCAL/UNVERIFIED, and why.

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::layout::{NODE_HEIGHT, NODE_WIDTH, layout};

const SCRIPT: &str = include_str!("arena.js");
pub(crate) const STYLE: &str = include_str!("arena.css");

/// What an arena is drawn from: the run's own records, as recorded.
pub struct ArenaInput<'a> {
    /// A name for the run in the page's title.
    pub title: &'a str,
    /// `plan.json`, byte for byte.
    pub plan: &'a str,
    /// The plan id the run records (`sha256:` and the plan's digest).
    pub plan_id: &'a str,
    /// Every line of the event log, as recorded, without newlines.
    pub events: &'a [String],
    /// The latest checkpoint note, when the run has one.
    pub checkpoint: Option<&'a str>,
    /// The verifier key the checkpoint's signature is checked against
    /// (`<name>+<id>+<base64>`), from outside the run.
    pub verifier: Option<&'a str>,
    /// What the artifact store knows of each artifact the log names.
    pub artifacts: &'a [Value],
    /// For a live page (`bl graph watch`): the URL, on the page's own
    /// server, of the Server-Sent Events that carry the events appended
    /// after these and each new checkpoint.
    pub live: Option<&'a str>,
    /// The child runs of its subgraph nodes, which the page expands in
    /// place and checks as it checks the run.
    pub children: &'a [ChildRun],
    /// The audit plan's coverage table and release verdict, when the run
    /// has a plan (with `plan_digest`, and the `logged_plan_digest` its log
    /// recorded, which the page holds against the verified log).
    pub audit: Option<&'a Value>,
    /// The decisions recorded on the run's approval nodes (approvals.json):
    /// each `{node_id, decision, decided_by, decided_by_source, decided_at,
    /// repair_round, signed}`, so that a decision an agent made is shown as
    /// an agent's, never as a person's.
    pub decisions: &'a [Value],
}

/// A subgraph node's child run, as recorded in its own directory.
#[derive(Debug, Clone, Default)]
pub struct ChildRun {
    /// The subgraph node of the parent run.
    pub node: String,
    /// Its directory, relative to the parent run (`subgraphs/<node>`).
    pub path: String,
    /// Why its records could not be read; the rest is then empty.
    pub unreadable: Option<String>,
    pub plan: String,
    pub plan_id: String,
    pub events: Vec<String>,
    pub checkpoint: Option<String>,
    pub artifacts: Vec<Value>,
    /// Its own subgraph nodes' child runs.
    pub children: Vec<ChildRun>,
}

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("plan.json is not a plan: {0}")]
    Plan(String),
}

/// The page, one HTML document with every asset inline.
pub fn arena_html(input: &ArenaInput) -> Result<String, PageError> {
    let svg = plan_drawing(input.plan)?;
    let data = json!({
        "plan": input.plan,
        "plan_id": input.plan_id,
        "events": input.events,
        "checkpoint": input.checkpoint,
        "verifier": input.verifier,
        "artifacts": input.artifacts,
        "live": input.live,
        "children": children_json(input.children),
        "audit": input.audit,
        "decisions": input.decisions,
    });
    // The records, gzipped and in base64: a run of 100,000 events is tens
    // of megabytes of JSON, a few as this; and base64 holds no `<`, so no
    // record can close the element or open a comment in it.
    let data = packed(&data);
    // A live page talks to its own server, and to nothing else.
    let connect = if input.live.is_some() {
        "; connect-src 'self'"
    } else {
        ""
    };
    let csp = format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; img-src data:; base-uri 'none'; form-action 'none'{connect}",
        csp_hash(SCRIPT),
        csp_hash(STYLE)
    );
    Ok(format!(
        r#"{head}<header>
<h1>bl arena <span class="run">{title}</span></h1>
<p id="trust" class="checking">Checking this page's records in your browser…</p>
<p id="summary"></p>
</header>
<main>
<section id="graph" aria-label="the graph">{svg}<div id="selected" hidden></div></section>
<aside id="details" aria-live="polite"><p class="hint">Click a node to see its events, verdicts, artifacts, route and spend.</p></aside>
</main>
<section id="audit" aria-label="the audit plan's coverage" hidden></section>
<section id="children" aria-label="expanded child runs"></section>
<section id="timeline" aria-label="when each attempt ran"><h2>Timeline</h2><p id="gantt-summary"></p><div id="gantt"></div></section>
<section id="log" aria-label="the event log"><h2>Event log</h2><nav><button id="prev" type="button">Earlier</button> <span id="page"></span> <button id="next" type="button">Later</button></nav><ol id="events"></ol></section>
<script type="application/octet-stream" id="bl-run" data-encoding="gzip+base64">{data}</script>
<script>{SCRIPT}</script>
</body>
</html>
"#,
        head = head("arena", input.title, &csp),
        title = escape(input.title),
    ))
}

/// JSON, gzipped (no timestamp in its header, so the same data gives the
/// same bytes) and in base64.
fn packed(data: &Value) -> String {
    use std::io::Write as _;
    let mut gz = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::default());
    gz.write_all(data.to_string().as_bytes())
        .and_then(|()| gz.try_finish())
        .expect("writing to memory does not fail");
    base64::engine::general_purpose::STANDARD.encode(gz.get_ref())
}

/// Each child run as the page's data holds it, with its drawing (a child
/// whose plan is not a plan is drawn as unreadable).
fn children_json(children: &[ChildRun]) -> Vec<Value> {
    children
        .iter()
        .map(|c| {
            let (svg, unreadable) = match (&c.unreadable, plan_drawing(&c.plan)) {
                (Some(why), _) => (String::new(), Some(why.clone())),
                (None, Ok(svg)) => (svg, None),
                (None, Err(e)) => (String::new(), Some(e.to_string())),
            };
            json!({
                "node": c.node, "path": c.path, "unreadable": unreadable, "svg": svg,
                "plan": c.plan, "plan_id": c.plan_id, "events": c.events,
                "checkpoint": c.checkpoint, "artifacts": c.artifacts,
                "children": children_json(&c.children),
            })
        })
        .collect()
}

/// A plan's DAG, laid out and drawn.
fn plan_drawing(plan: &str) -> Result<String, PageError> {
    let plan: Value = serde_json::from_str(plan).map_err(|e| PageError::Plan(e.to_string()))?;
    let ids: Vec<&str> = plan["nodes"]
        .as_array()
        .ok_or_else(|| PageError::Plan("it has no nodes".into()))?
        .iter()
        .map(|n| n["node_id"].as_str().unwrap_or_default())
        .collect();
    let index = |id: &str| ids.iter().position(|n| *n == id);
    let edges: Vec<(usize, usize, Option<&str>)> = plan["edges"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|e| {
            Some((
                index(e["from_node"].as_str()?)?,
                index(e["to_node"].as_str()?)?,
                e["when"].as_str(),
            ))
        })
        .collect();
    let pairs: Vec<(usize, usize)> = edges.iter().map(|&(a, b, _)| (a, b)).collect();
    let placed = layout(ids.len(), &pairs);
    Ok(drawing(&ids, &vec![""; ids.len()], &edges, &placed))
}

/// The start of every page, up to `<body>`: its policy, its title (`bl
/// <kind>: <title>`) and the one stylesheet, inline.
pub(crate) fn head(kind: &str, title: &str, csp: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bl {kind}: {title}</title>
<style>{STYLE}</style>
</head>
<body>
"#,
        title = escape(title),
    )
}

/// The policy of a page whose one script talks only to its own server:
/// that script and the stylesheet, allowed by their hashes, and nothing
/// else.
pub(crate) fn own_server_policy(script: &str) -> String {
    format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        csp_hash(script),
        csp_hash(STYLE)
    )
}

/// `value` as JSON that is safe inside a `<script>` element.
pub(crate) fn script_data(value: &serde_json::Value) -> String {
    value.to_string().replace('<', "\\u003c")
}

/// `sha256-<base64>` of an inline script or style, for the CSP.
pub(crate) fn csp_hash(text: &str) -> String {
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()))
    )
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The SVG: an edge as a curve from the bottom of its parent to the top
/// of its child (labelled with its `when`), a node as a box with its id
/// and a note under it. Every node starts grey: the arena's script colours
/// it once its events verify.
pub(crate) fn drawing(
    ids: &[&str],
    notes: &[&str],
    edges: &[(usize, usize, Option<&str>)],
    placed: &crate::layout::Layout,
) -> String {
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img">"#,
        w = placed.width,
        h = placed.height
    );
    for &(from, to, when) in edges {
        let (a, b) = (placed.nodes[from], placed.nodes[to]);
        let (x1, y1) = (a.x + NODE_WIDTH / 2.0, a.y + NODE_HEIGHT);
        let (x2, y2) = (b.x + NODE_WIDTH / 2.0, b.y);
        let mid = (y1 + y2) / 2.0;
        svg.push_str(&format!(
            r#"<path class="edge" data-from="{f}" data-to="{t}" d="M{x1:.1},{y1:.1} C{x1:.1},{mid:.1} {x2:.1},{mid:.1} {x2:.1},{y2:.1}"/>"#,
            f = escape(ids[from]),
            t = escape(ids[to]),
        ));
        if let Some(when) = when {
            svg.push_str(&format!(
                r#"<text class="when" x="{:.1}" y="{:.1}">{}</text>"#,
                (x1 + x2) / 2.0 + 4.0,
                mid,
                escape(when)
            ));
        }
    }
    for (i, id) in ids.iter().enumerate() {
        let p = placed.nodes[i];
        svg.push_str(&format!(
            r#"<g class="node unverified" data-node="{id}" tabindex="0" transform="translate({x:.1},{y:.1})"><rect width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="6"/><text x="8" y="18">{id}</text><text class="state" x="8" y="36">{note}</text></g>"#,
            id = escape(id),
            note = escape(notes.get(i).copied().unwrap_or_default()),
            x = p.x,
            y = p.y,
        ));
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(plan: &'a str, events: &'a [String]) -> ArenaInput<'a> {
        ArenaInput {
            title: "r<1>",
            plan,
            plan_id: "sha256:00",
            events,
            checkpoint: None,
            verifier: None,
            artifacts: &[],
            live: None,
            children: &[],
            audit: None,
            decisions: &[],
        }
    }

    #[test]
    fn the_page_is_one_file_with_a_strict_policy_and_the_same_run_gives_the_same_bytes() {
        let plan = r#"{"nodes":[{"node_id":"a"},{"node_id":"b"}],"edges":[{"from_node":"a","to_node":"b","when":"passed"}]}"#;
        let events = vec![
            r#"{"x":"</script><script>alert(1)</script>"}"#.to_string(),
            r#"{"y":"<!--<script "}"#.to_string(),
        ];
        let page = arena_html(&input(plan, &events)).unwrap();
        assert_eq!(page, arena_html(&input(plan, &events)).unwrap());
        assert!(page.contains("default-src 'none'"));
        assert_eq!(
            page.matches("http://").count(),
            page.matches("http://www.w3.org/2000/svg").count(),
            "no address but the SVG namespace"
        );
        assert!(!page.contains("src=\""), "nothing is loaded");
        assert!(page.contains(r#"data-node="a""#) && page.contains(r#"data-node="b""#));
        assert!(page.contains(">passed</text>"));
        assert!(page.contains("r&lt;1&gt;"));
        // A line can neither close the data element nor open a comment in
        // it that would swallow the page's script.
        assert_eq!(page.matches("</script>").count(), 2);
        assert_eq!(page.matches("<!--").count(), 0);
        assert_eq!(page.matches("<script").count(), 2);
        assert!(page.contains(&csp_hash(SCRIPT)) && page.contains(&csp_hash(STYLE)));
    }

    #[test]
    fn a_plan_that_is_not_json_is_refused() {
        assert!(arena_html(&input("{", &[])).is_err());
    }
}
