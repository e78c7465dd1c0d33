//! bl's end-to-end tests, one test binary (so the suite links wasmtime
//! once): each module drives the real `bl` binary, real components, real
//! processes and real bubblewrap for one area. Run one area with
//! `cargo test -p bl-e2e --test all graph_cli::`.

mod browser;
mod durability;
mod egress_cli;
mod egress_sandbox;
mod evidence;
mod graph_arena;
mod graph_artifacts;
mod graph_cli;
mod graph_console;
mod graph_cost;
mod graph_exec;
mod graph_metrics;
mod graph_newcomer;
mod graph_runs;
mod graph_stop;
mod graph_studio;
mod graph_watch;
mod hostile_input;
mod loop_catalog;
mod loop_report;
mod loop_run;
mod mcp;
mod mcp_tasks;
mod monitor;
mod plugin_cli;
mod plugin_pipeline;
mod plugin_polyglot;
mod plugin_registry;
mod plugin_runtime;
mod provable_log;
mod run_dir_tamper;
mod runtime_api;
mod sandbox_cli;
mod store_processes;
mod verify_cli;
