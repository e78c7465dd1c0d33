//! The approval console: each approval node a run waits on, with the
//! digests of the evidence it would approve (its parents' artifacts), and
//! an Approve and a Reject button. A click sends the node, the decision
//! and the request digest the page was served with; the server refuses it
//! if the evidence changed since. The page's one script is allowed by its
//! hash and talks only to its own server.

use serde_json::json;

use crate::arena::{escape, head, own_server_policy, script_data};

/// The consoles' one script: it posts a card's `data-post` fields with
/// the decision clicked.
pub(crate) const SCRIPT: &str = include_str!("console.js");

/// One approval a run waits on, as the runtime API states it.
pub struct ConsoleApproval<'a> {
    pub node: &'a str,
    pub request_digest: &'a str,
    /// What its parents produced.
    pub evidence: Vec<ConsoleEvidence<'a>>,
}

/// One artifact an approval would let through.
pub struct ConsoleEvidence<'a> {
    pub digest: &'a str,
    /// The node that made it.
    pub producer: &'a str,
    /// Its port or path, whichever the run names (both: the path).
    pub name: Option<&'a str>,
    pub size: u64,
}

/// The console page: `decide` is the path decisions are posted to.
pub fn console_html(title: &str, approvals: &[ConsoleApproval], decide: &str) -> String {
    let mut cards = String::new();
    for a in approvals {
        let evidence: String = a
            .evidence
            .iter()
            .map(|e| {
                let made = match e.name {
                    Some(name) => format!("{} from {}", escape(name), escape(e.producer)),
                    None => format!("from {}", escape(e.producer)),
                };
                format!(
                    r#"<li class="evidence"><span class="what">{made}</span>, <span class="size">{size} bytes</span><br><span class="digest">{digest}</span></li>"#,
                    size = e.size,
                    digest = escape(e.digest),
                )
            })
            .collect();
        cards.push_str(&format!(
            r#"<section class="approval" data-node="{node}" data-request="{request}" data-post="{post}"><h2>{node}</h2><p>Approving lets the run go on with this evidence, and nothing else:</p><ul>{evidence}</ul><p class="request">request {request}</p><button type="button" data-decision="approved">Approve</button> <button type="button" data-decision="rejected">Reject</button><p class="outcome" aria-live="polite"></p></section>"#,
            node = escape(a.node),
            request = escape(a.request_digest),
            post = escape(
                &json!({ "node": a.node, "request_digest": a.request_digest }).to_string()
            ),
        ));
    }
    if approvals.is_empty() {
        cards.push_str("<p>Nothing in this run waits for a decision.</p>");
    }
    let data = script_data(&json!({ "decide": decide }));
    let csp = own_server_policy(SCRIPT);
    format!(
        r#"{head}<header><h1>bl console <span class="run">{title}</span></h1></header>
<main class="console">{cards}</main>
<script type="application/json" id="bl-console">{data}</script>
<script>{SCRIPT}</script>
</body>
</html>
"#,
        head = head("console", title, &csp),
        title = escape(title),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_approval_shows_its_evidence_and_request_and_the_script_is_allowed_by_hash() {
        let page = console_html(
            "r",
            &[ConsoleApproval {
                node: "review",
                request_digest: "sha256:cd",
                evidence: vec![ConsoleEvidence {
                    digest: "sha256:ab",
                    producer: "write-<brief>",
                    name: Some("workspace/brief.md"),
                    size: 1234,
                }],
            }],
            "/t/decide",
        );
        assert!(page.contains(r#"data-node="review" data-request="sha256:cd""#));
        assert!(page.contains("sha256:ab"));
        assert!(
            page.contains("workspace/brief.md from write-&lt;brief&gt;</span>, <span class=\"size\">1234 bytes"),
            "{page}"
        );
        assert!(page.contains(&crate::arena::csp_hash(SCRIPT)));
        assert!(page.contains("connect-src 'self'"));
    }
}
