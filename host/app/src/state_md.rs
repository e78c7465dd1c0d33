//! A run's state as Markdown (seed 000's STATE.md): what the arena shows,
//! as text, for a person or an agent to read. A projection of the run's own
//! log on this machine, never a record: it says so at the top.

use bl_graph::model::Named;

use crate::graph_run::RunStatus;

/// A table cell: one line, and no `|` to break the table.
fn cell(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ").replace('|', "\\|");
    if text.is_empty() { "—".into() } else { text }
}

/// A digest shortened for a table (the full one is in the log).
fn short(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("sha256:{}…", &hex[..hex.len().min(12)])
}

impl RunStatus {
    /// The run's state as Markdown: its state, plan, log head, what waits
    /// for a decision, each node (kind, state, attempts, gate, spend,
    /// artifacts, reason) and each edge.
    pub fn to_markdown(&self) -> String {
        let (run, view, head) = (&self.run, &self.view, &self.head);
        let name = run
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| run.dir.display().to_string());
        let order: Vec<&str> = run.graph.nodes.iter().map(|n| n.id.as_str()).collect();
        let waiting = view.awaiting(order.iter().copied());
        let mut md = format!("# Run {}\n\n", cell(&name));
        md.push_str(&format!(
            "> LOCAL/UNVERIFIED: projected from this run's own event log on this machine. \
             The log and its checkpoints are the record; check them with `bl verify {}`. \
             This file is never authority.\n\n",
            run.dir.display()
        ));
        md.push_str(&format!(
            "- **State:** {}{}\n",
            self.run_in_words(),
            if self.live {
                " (being written now)"
            } else {
                ""
            }
        ));
        md.push_str(&format!("- **Plan:** `{}`\n", run.plan.plan_id));
        md.push_str(&format!(
            "- **Events:** {}, head `{}`\n",
            head.sequence, head.hash
        ));
        md.push_str(&format!(
            "- **Spend:** {} tokens, {} microunits{}\n",
            view.tokens,
            view.cost_microunits,
            if view.spend_complete {
                ""
            } else {
                " (some workers did not report usage)"
            }
        ));
        md.push_str(&format!(
            "- **Waiting for a decision:** {}\n\n",
            if waiting.is_empty() {
                "nothing".to_string()
            } else {
                waiting.join(", ")
            }
        ));
        md.push_str("## Nodes\n\n| Node | Kind | State | Attempts | Gate | Spend | Artifacts | Reason |\n|---|---|---|---|---|---|---|---|\n");
        for node in &run.graph.nodes {
            let n = view.node(&node.id);
            let gate = match n.gate_passed {
                Some(true) => "passed",
                Some(false) => "failed",
                None => "",
            };
            let artifacts: Vec<String> = n.artifact_digests.iter().map(|d| short(d)).collect();
            let (state, reason) = self.node_in_words(&n);
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                cell(&node.id),
                cell(node.kind.name()),
                state,
                n.attempt,
                cell(gate),
                cell(&if n.spend_tokens > 0 {
                    format!("{} tokens", n.spend_tokens)
                } else {
                    String::new()
                }),
                cell(&artifacts.join(", ")),
                cell(reason.as_deref().unwrap_or_default()),
            ));
        }
        if !run.graph.edges.is_empty() {
            md.push_str("\n## Edges\n\n| From | To | When |\n|---|---|---|\n");
            for edge in &run.graph.edges {
                md.push_str(&format!(
                    "| {} | {} | {} |\n",
                    cell(&edge.from_node),
                    cell(&edge.to_node),
                    cell(edge.when.map(|w| w.name()).unwrap_or_default()),
                ));
            }
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_one_line_and_cannot_break_its_table() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
        assert_eq!(cell(""), "—");
        assert_eq!(short("sha256:0123456789abcdef"), "sha256:0123456789ab…");
    }
}
