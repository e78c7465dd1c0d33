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
    let (world_name, package) = identify_world(&bindgen.resolve, bindgen.world)?;

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
    Ok(Encoded {
        bytes,
        world: world_name,
        package,
    })
}

/// Each bl world, by the function it exports at the top level.
const WORLDS_BY_EXPORT: &[(&str, &str)] = &[("check", "gate")];

/// Names the bl world a module's bindings implement, and the `bl:plugin`
/// package version its imports come from. wit-component merges every
/// bindings section into one synthetic world, so the world is recognised by
/// its exports rather than by name.
fn identify_world(
    resolve: &wit_parser::Resolve,
    world: wit_parser::WorldId,
) -> Result<(String, String), BuildError> {
    let world = &resolve.worlds[world];
    let exported: Vec<String> = world
        .exports
        .keys()
        .map(|k| resolve.name_world_key(k))
        .collect();
    let name = WORLDS_BY_EXPORT
        .iter()
        .find(|(export, _)| exported.iter().any(|e| e == export))
        .map(|(_, world)| world.to_string())
        .ok_or_else(|| {
            BuildError::Component(format!(
                "the module exports {exported:?}, which matches no bl world (a gate exports `check`)"
            ))
        })?;
    let package = world
        .imports
        .keys()
        .chain(world.exports.keys())
        .filter_map(|key| match key {
            wit_parser::WorldKey::Interface(id) => resolve.interfaces[*id].package,
            wit_parser::WorldKey::Name(_) => None,
        })
        .map(|id| &resolve.packages[id].name)
        .find(|p| p.namespace == "bl" && p.name == "plugin")
        .map(|p| p.to_string())
        .unwrap_or_else(|| crate::WIT_PACKAGE.to_string());
    Ok((name, package))
}

/// The source digest a component was stamped with, if any.
pub fn read_source_digest(component: &[u8]) -> Result<Option<String>, BuildError> {
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(component) {
        let payload =
            payload.map_err(|e| BuildError::Component(format!("not a valid component: {e}")))?;
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            // Only the outermost component's section counts: a nested
            // module could carry anything.
            Payload::CustomSection(reader)
                if depth == 0 && reader.name() == SOURCE_DIGEST_SECTION =>
            {
                return Ok(Some(String::from_utf8_lossy(reader.data()).into_owned()));
            }
            _ => {}
        }
    }
    Ok(None)
}
