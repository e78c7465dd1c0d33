//! bl's application layer: the use cases every front end drives (the CLI
//! today; the pages, the MCP server and remote workers next), as a library.
//! It composes the domain crates (bl-graph, bl-run, bl-loops) with their
//! adapters (bl-store, bl-workers, bl-sandbox, bl-plugins, bl-handoff) and
//! prints nothing: what a front end shows is its own business, and side
//! remarks go through [`notes`].

pub mod approvals;
mod arena;
pub mod bundled_loops;
pub mod cage;
pub mod egress_proxy;
pub mod error;
pub mod evidence;
pub mod evidence_reviewer;
mod evidence_sealer;
pub mod graph_authoring;
pub mod graph_metrics;
pub mod graph_nodes;
pub mod graph_plan;
pub mod graph_run;
pub mod keys;
pub mod loop_gates;
pub mod loop_info;
pub mod loop_library;
pub mod loop_process;
pub mod loop_report;
pub mod loop_run;
pub mod loop_runtime;
pub mod loop_trace;
pub mod monitor;
pub mod notes;
pub mod paths;
pub mod plugin_conformance;
pub mod plugin_host;
pub mod plugin_registry;
pub mod plugin_run;
pub mod plugin_scaffold;
pub mod registry_mirror;
pub mod run_adapters;
pub mod runtime;
mod state_md;
pub mod status_text;
pub mod stop;
pub mod studio;
#[cfg(test)]
mod test_support;
mod unsynced_tail;

pub use error::{AppError, AppResult};
