//! bl's graph compiler for `bounded-loops.dev/graph/v1` manifests: parsing
//! (YAML or JSON, with line and column for every value), validation with
//! upstream's 37 refusal codes and JSON pointers, the normalised graph
//! digest, admission of connections and the canonical plan whose sha256 is
//! the plan_id. A manifest bounded-loops 0.7 accepts gets the same digest
//! and plan_id here.
//!
//! This crate is pure: it takes text and values and returns results. It
//! never reads files, runs anything or looks at the clock; the CLI does the
//! reading and the graph executor (later) does the running.

pub mod artifacts;
pub mod doc;
pub mod model;
pub mod parse;
pub mod plan;
pub mod records;
pub mod report;
pub mod schema;
pub mod validate;
pub mod yaml;

pub use doc::{Node, Pos};
pub use model::Graph;
pub use parse::ParseError;
pub use plan::{
    CompileError, CompileInput, Connection, Plan, compile, graph_digest, parse_connections,
};
pub use validate::{LintError, validate};

/// The manifest formats, chosen by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

impl Format {
    /// `.json`, `.yaml` or `.yml`, in any case.
    pub fn from_path(path: &std::path::Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "json" => Some(Format::Json),
            "yaml" | "yml" => Some(Format::Yaml),
            _ => None,
        }
    }
}

/// Why a manifest was refused, wherever in the pipeline it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    pub pointer: String,
    /// Where the offending value was written, when known.
    pub pos: Option<Pos>,
}

/// Parses and validates manifest text.
pub fn lint(text: &str, format: Format) -> Result<Graph, Refusal> {
    let doc = match format {
        Format::Json => parse::parse_json(text),
        Format::Yaml => yaml::parse_yaml(text),
    }
    .map_err(|e| Refusal {
        code: e.code,
        message: e.message,
        pointer: "/".into(),
        pos: e.pos,
    })?;
    validate(&doc).map_err(|e| {
        let pos = doc.locate(e.pointer.trim_start_matches('/'));
        Refusal {
            code: e.code,
            message: e.message,
            pointer: e.pointer,
            pos,
        }
    })
}
