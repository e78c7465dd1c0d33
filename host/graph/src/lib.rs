//! bl's graph compiler for `bounded-loops.dev/graph/v1` manifests: parsing
//! (YAML or JSON, with line and column for every value), validation with
//! upstream's 37 refusal codes and JSON pointers, the normalised graph
//! digest, admission of connections and the canonical plan whose sha256 is
//! the plan_id. A manifest bounded-loops 0.7 accepts gets the same digest
//! and plan_id here.
//!
//! Every refusal is one [`Refusal`] with a typed [`RefusalCode`]. The
//! modules depend on each other in one direction only: `doc` and `model`
//! (the typed graph and its enums) at the bottom, then `error`, `dag` (the
//! graph algorithms), `parse`/`yaml`, `artifacts`, `validate` (the only
//! way to make a [`Graph`]), `records`, `plan` and `report`.
//!
//! This crate is pure: it takes text and values and returns results. It
//! never reads files, runs anything or looks at the clock; the CLI does the
//! reading and the graph executor (later) does the running.

pub mod artifacts;
pub mod audit;
pub mod connect;
pub mod dag;
pub mod doc;
pub mod error;
pub mod hazards;
pub mod model;
pub mod parse;
pub mod plan;
pub mod records;
pub mod report;
pub mod schema;
pub mod validate;
pub mod yaml;

pub use doc::{Node, Pos};
pub use error::{Refusal, RefusalCode};
pub use model::Graph;
pub use parse::ParseError;
pub use plan::{
    CompileError, CompileInput, Connection, ConnectionsError, Plan, compile, graph_digest,
    parse_connections,
};
pub use validate::validate;

/// A refusal from validation (the one refusal type of the crate).
pub type LintError = Refusal;

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

/// The largest manifest or connections document read, in bytes. Real ones
/// are a few KiB; the cap keeps reading bounded in time and memory.
pub const MAX_DOCUMENT_BYTES: usize = 16 << 20;

/// Refuses a document longer than [`MAX_DOCUMENT_BYTES`] with the format's
/// parse code (`invalid_yaml` or `invalid_json`), naming the limit. Readers
/// call it on the byte count before decoding, so they never read more than
/// one byte past the limit.
pub fn check_size(len: usize, format: Format) -> Result<(), Refusal> {
    if len <= MAX_DOCUMENT_BYTES {
        return Ok(());
    }
    let code = match format {
        Format::Json => RefusalCode::InvalidJson,
        Format::Yaml => RefusalCode::InvalidYaml,
    };
    Refusal::err(
        code,
        "/",
        format!(
            "the document is larger than bl's limit of {MAX_DOCUMENT_BYTES} bytes ({} MiB); split it, or move large values into files it names",
            MAX_DOCUMENT_BYTES >> 20
        ),
    )
}

/// Where `pointer` (a JSON pointer) lies in manifest text: its line and
/// column, for a message that names the place.
pub fn locate(text: &str, format: Format, pointer: &str) -> Option<Pos> {
    parse_document(text, format)
        .ok()?
        .locate(pointer.trim_start_matches('/'))
}

/// Manifest text as a tree of values that remember their places, before
/// validation.
pub fn parse_document(text: &str, format: Format) -> Result<Node, ParseError> {
    match format {
        Format::Json => parse::parse_json(text),
        Format::Yaml => yaml::parse_yaml(text),
    }
}

/// Parses and validates manifest text.
pub fn lint(text: &str, format: Format) -> Result<Graph, Refusal> {
    check_size(text.len(), format)?;
    let doc = parse_document(text, format)?;
    validate(&doc).map_err(|mut refusal| {
        let at = refusal.focus.as_deref().unwrap_or(&refusal.pointer);
        let key = (refusal.code == RefusalCode::UnknownField)
            .then(|| doc.locate_key(at))
            .flatten();
        refusal.pos = key
            .or_else(|| doc.locate(at))
            .or_else(|| doc.locate(&refusal.pointer));
        refusal
    })
}
