//! The evidence console: each decision of an evidence service that waits
//! for a person (an approval, or a reconciliation after an ambiguous
//! call), with everything a signature would bind, and its buttons. A
//! click sends the operation, the answer and the digest of what the card
//! showed; the server refuses it if the decision changed since. The same
//! script as the approval console, allowed by its hash.

use serde_json::json;

use crate::arena::{escape, head, own_server_policy, script_data};
use crate::console::SCRIPT;

/// A decision that waits for a person, as the service states it.
pub struct EvidenceCard<'a> {
    pub operation_id: &'a str,
    /// `awaiting_approval` or `reconciliation_required`.
    pub stage: &'a str,
    pub tool: &'a str,
    pub identity: &'a str,
    pub thread_id: &'a str,
    pub args_digest: &'a str,
    /// The policy's id and version, and its reason.
    pub policy: Option<(&'a str, &'a str, &'a str)>,
    /// The pause an approval answers: (checkpoint namespace, interrupt id).
    pub pause: Option<(&'a str, &'a str)>,
    /// The digest of what this card shows, sent back with a decision.
    pub shown: &'a str,
}

/// Who signs, and for how long an approval holds.
pub struct Reviewing<'a> {
    /// The reviewer's key's name: the review names it.
    pub reviewer: &'a str,
    /// The workspace key the service signs with.
    pub workspace: &'a str,
    /// How long an approval holds, as words (`1h`).
    pub valid_for: &'a str,
}

/// The evidence console page: `decide` is the path decisions go to.
pub fn evidence_console_html(
    reviewing: &Reviewing,
    cards: &[EvidenceCard],
    decide: &str,
) -> String {
    let mut shown = String::new();
    for c in cards {
        let row = |name: &str, value: &str| {
            format!(
                r#"<tr><th>{name}</th><td class="{class}">{value}</td></tr>"#,
                class = name.replace(' ', "-"),
                value = escape(value)
            )
        };
        let mut rows = [
            row("tool", c.tool),
            row("for", c.identity),
            row("thread", c.thread_id),
            row("arguments", c.args_digest),
        ]
        .concat();
        if let Some((id, version, reason)) = c.policy {
            rows.push_str(&row("policy", &format!("{id} {version}: {reason}")));
        }
        if let Some((namespace, interrupt)) = c.pause {
            rows.push_str(&row("pause", &format!("{namespace} / {interrupt}")));
        }
        let (ask, buttons) = if c.stage == "reconciliation_required" {
            (
                "The call's outcome is not known. Say whether the tool ran; nothing is replayed either way.".to_string(),
                r#"<button type="button" data-decision="executed">It ran</button> <button type="button" data-decision="not_executed">It did not run</button>"#,
            )
        } else {
            (
                format!(
                    "Approving lets this call happen once, with exactly these arguments, for {}.",
                    escape(reviewing.valid_for)
                ),
                r#"<button type="button" data-decision="approved">Approve</button> <label>reason for a rejection <input class="reason" type="text" maxlength="500"></label> <button type="button" data-decision="rejected">Reject</button>"#,
            )
        };
        let post = json!({ "operation_id": c.operation_id, "shown": c.shown }).to_string();
        shown.push_str(&format!(
            r#"<section class="approval" data-operation="{op}" data-stage="{stage}" data-post="{post}"><h2>{op}</h2><p>{ask}</p><table>{rows}</table><p class="request">shown {digest}</p>{buttons}<p class="outcome" aria-live="polite"></p></section>"#,
            op = escape(c.operation_id),
            stage = escape(c.stage),
            post = escape(&post),
            digest = escape(c.shown),
        ));
    }
    if cards.is_empty() {
        shown.push_str("<p>No decision waits for a person. Reload to look again.</p>");
    }
    let data = script_data(&json!({ "decide": decide }));
    let csp = own_server_policy(SCRIPT);
    format!(
        r#"{head}<header><h1>bl evidence console</h1><p>You sign as <strong>{reviewer}</strong>, for the workspace key <span class="digest">{workspace}</span>.</p></header>
<main class="console">{shown}</main>
<script type="application/json" id="bl-console">{data}</script>
<script>{SCRIPT}</script>
</body>
</html>
"#,
        head = head("console", "evidence", &csp),
        reviewer = escape(reviewing.reviewer),
        workspace = escape(reviewing.workspace),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_card_shows_what_a_signature_binds_and_posts_its_operation_and_shown_digest() {
        let page = evidence_console_html(
            &Reviewing {
                reviewer: "alice",
                workspace: "ws:ab",
                valid_for: "1h",
            },
            &[
                EvidenceCard {
                    operation_id: "refund-<7>",
                    stage: "awaiting_approval",
                    tool: "refund",
                    identity: "agent",
                    thread_id: "t1",
                    args_digest: "sha256:aa",
                    policy: Some(("tool-policy", "1", "needs a person")),
                    pause: Some(("", "int-1")),
                    shown: "sha256:cc",
                },
                EvidenceCard {
                    operation_id: "mail",
                    stage: "reconciliation_required",
                    tool: "send",
                    identity: "agent",
                    thread_id: "t2",
                    args_digest: "sha256:bb",
                    policy: None,
                    pause: None,
                    shown: "sha256:dd",
                },
            ],
            "/t/decide",
        );
        assert!(
            page.contains(r#"data-operation="refund-&lt;7&gt;""#),
            "{page}"
        );
        assert!(page.contains(
            r#"data-post="{&quot;operation_id&quot;:&quot;refund-&lt;7&gt;&quot;,&quot;shown&quot;:&quot;sha256:cc&quot;}""#
        ), "{page}");
        assert!(page.contains("tool-policy 1: needs a person"));
        assert!(page.contains(" / int-1"));
        assert!(page.contains(r#"data-decision="not_executed""#));
        assert!(page.contains("<strong>alice</strong>"));
        assert!(page.contains(&crate::arena::csp_hash(SCRIPT)));
    }
}
