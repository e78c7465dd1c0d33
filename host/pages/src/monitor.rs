//! `bl monitor`'s page: a project's runs (state, spend against caps, each
//! node's state and receipt), kept current from its own server; links to
//! each graph run's live arena and console and each loop run's report; and
//! the project's graph manifests and loop packages, each started only
//! after a preview, by that preview's digest.

use serde_json::json;

use crate::arena::{escape, head, own_server_policy, script_data};

const SCRIPT: &str = include_str!("monitor.js");

/// The page for the project named `title`; everything it shows comes
/// from its own server, under the page's own path.
pub fn monitor_html(title: &str) -> String {
    let data = script_data(&json!({ "refresh_ms": 1500 }));
    let csp = own_server_policy(SCRIPT);
    format!(
        r#"{head}<header><h1>bl monitor <span class="run">{title}</span></h1><p id="status" aria-live="polite">Reading the project…</p></header>
<main class="monitor">
<section id="runs-box" aria-label="runs"><h2>Runs</h2><table id="runs"><thead><tr><th>run</th><th>kind</th><th>state</th><th>spend (tokens / cap, or laps)</th><th>nodes, or loop</th><th></th></tr></thead><tbody></tbody></table></section>
<section id="start-box" aria-label="start a run"><h2>Start a graph or a loop</h2><ul id="manifests"></ul><div id="preview"></div></section>
</main>
<script type="application/json" id="bl-monitor">{data}</script>
<script>{SCRIPT}</script>
</body>
</html>
"#,
        head = head("monitor", title, &csp),
        title = escape(title),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_runs_only_its_own_script_and_talks_only_to_its_server() {
        let page = super::monitor_html("p<x>");
        assert!(page.contains(&crate::arena::csp_hash(super::SCRIPT)));
        assert!(page.contains("connect-src 'self'"));
        assert!(page.contains("p&lt;x&gt;"));
        assert!(!page.contains("http://") && !page.contains("https://"));
    }
}
