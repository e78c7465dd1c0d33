//! Core wasm module → component, and the source-digest stamp.

use wasm_encoder::{ComponentSection, CustomSection, Encode};
use wasmparser::{Parser, Payload};

use crate::BuildError;

/// The name of the component-level custom section that carries
/// `sha256:<hex>` of the plugin's sources.
pub const SOURCE_DIGEST_SECTION: &str = "bl:source-digest";

pub struct Encoded {
    pub bytes: Vec<u8>,
    /// The world named in the module's bindings, e.g. `gate`.
    pub world: String,
    /// The package of that world, e.g. `bl:plugin@0.1.0`.
    pub package: String,
}

/// Wraps a core module that carries wit-bindgen's component-type section
/// into a component, validates it, and stamps it with `source_digest`.
pub fn encode(core_module: &[u8], source_digest: &str) -> Result<Encoded, BuildError> {
    let (_, bindgen) = wit_component::metadata::decode(core_module).map_err(|e| {
        BuildError::Component(format!(
            "the module has no readable WIT bindings (was it built with the bl SDK or wit-bindgen?): {e:#}"
        ))
    })?;
    let world = &bindgen.resolve.worlds[bindgen.world];
    let package = world
        .package
        .map(|id| bindgen.resolve.packages[id].name.to_string())
        .unwrap_or_default();
    let world_name = world.name.clone();

    let mut bytes = wit_component::ComponentEncoder::default()
        .module(core_module)
        .and_then(|encoder| encoder.validate(true).encode())
        .map_err(|e| BuildError::Component(format!("encoding the component failed: {e:#}")))?;

    let section = CustomSection {
        name: SOURCE_DIGEST_SECTION.into(),
        data: source_digest.as_bytes().into(),
    };
    bytes.push(ComponentSection::id(&section));
    section.encode(&mut bytes);
    Ok(Encoded { bytes, world: world_name, package })
}

/// The source digest a component was stamped with, if any.
pub fn read_source_digest(component: &[u8]) -> Result<Option<String>, BuildError> {
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(component) {
        let payload = payload.map_err(|e| BuildError::Component(format!("not a valid component: {e}")))?;
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            // Only the outermost component's section counts: a nested
            // module could carry anything.
            Payload::CustomSection(reader) if depth == 0 && reader.name() == SOURCE_DIGEST_SECTION => {
                return Ok(Some(String::from_utf8_lossy(reader.data()).into_owned()));
            }
            _ => {}
        }
    }
    Ok(None)
}
