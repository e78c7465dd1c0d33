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

    let section = digest_section(source_digest);
    bytes.push(ComponentSection::id(&section));
    section.encode(&mut bytes);
    Ok(Encoded {
        bytes,
        world: world_name,
        package,
    })
}

fn digest_section(source_digest: &str) -> CustomSection<'_> {
    CustomSection {
        name: SOURCE_DIGEST_SECTION.into(),
        data: source_digest.as_bytes().into(),
    }
}

/// Stamps a finished component with `source_digest` (a custom section may
/// end a component): for components another tool made.
pub fn stamp_component(component: &mut Vec<u8>, source_digest: &str) {
    let section = digest_section(source_digest);
    component.push(ComponentSection::id(&section));
    section.encode(component);
}

/// Stamps a plain core module with `source_digest`, in the same custom
/// section a component carries (a custom section may end a module).
pub fn stamp_module(module: &mut Vec<u8>, source_digest: &str) {
    let section = digest_section(source_digest);
    module.push(wasm_encoder::Section::id(&section));
    section.encode(module);
}

/// Each bl world, by the function it exports at the top level and that
/// function's parameter count (a gate's and a contract's `check` differ).
const WORLDS_BY_EXPORT: &[(&str, usize, &str)] = &[
    ("check", 2, "gate"),
    ("check", 3, "completion-contract"),
    ("run", 4, "transform"),
    ("decide", 2, "publication-policy"),
];

/// Names the bl world a module's bindings implement, and the `bl:plugin`
/// package version its imports come from. wit-component merges every
/// bindings section into one synthetic world, so the world is recognised by
/// its exports rather than by name.
fn identify_world(
    resolve: &wit_parser::Resolve,
    world: wit_parser::WorldId,
) -> Result<(String, String), BuildError> {
    let world = &resolve.worlds[world];
    let exported: Vec<(String, usize)> = world
        .exports
        .iter()
        .map(|(k, item)| {
            let params = match item {
                wit_parser::WorldItem::Function(f) => f.params.len(),
                _ => usize::MAX,
            };
            (resolve.name_world_key(k), params)
        })
        .collect();
    let name = WORLDS_BY_EXPORT
        .iter()
        .find(|(export, params, _)| exported.iter().any(|(e, p)| e == export && p == params))
        .map(|(_, _, world)| world.to_string())
        .ok_or_else(|| {
            let names: Vec<&str> = exported.iter().map(|(e, _)| e.as_str()).collect();
            BuildError::Component(format!(
                "the module exports {names:?}, which matches no bl world \
                 (gate and completion-contract export `check`, transform `run`, publication-policy `decide`)"
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

/// A component's top-level imports, each with whether it brings any
/// function, read from its decoded WIT.
pub fn imports(component: &[u8]) -> Result<Vec<bl_core::plugin::Import>, BuildError> {
    let (resolve, world_id) = decode(component)?;
    let world = &resolve.worlds[world_id];
    Ok(world
        .imports
        .iter()
        .map(|(key, item)| {
            let has_functions = match item {
                wit_parser::WorldItem::Interface { id, .. } => {
                    !resolve.interfaces[*id].functions.is_empty()
                }
                wit_parser::WorldItem::Function(_) => true,
                wit_parser::WorldItem::Type { .. } => false,
            };
            bl_core::plugin::Import::new(resolve.name_world_key(key), has_functions)
        })
        .collect())
}

fn decode(component: &[u8]) -> Result<(wit_parser::Resolve, wit_parser::WorldId), BuildError> {
    match wit_component::decode(component)
        .map_err(|e| BuildError::Component(format!("not a readable component: {e:#}")))?
    {
        wit_component::DecodedWasm::Component(resolve, world) => Ok((resolve, world)),
        wit_component::DecodedWasm::WitPackage(..) => Err(BuildError::Component(
            "this is a WIT package, not a component".into(),
        )),
    }
}

/// What `bl plugin inspect` shows about a component, read from its bytes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ComponentSummary {
    /// The bl world its exports match, if any.
    pub world: Option<String>,
    /// The `bl:plugin` package version it was built against.
    pub wit_package: Option<String>,
    /// The imports that bring functions (type-only imports are left out).
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// The grantable capabilities among the imports.
    pub capabilities: Vec<String>,
    pub source_digest: Option<String>,
    /// `sha256:` over the bytes.
    pub component_digest: String,
}

/// The world a finished component implements, and that world's package.
pub fn world_of(component: &[u8]) -> Result<(String, String), BuildError> {
    let (resolve, world) = decode(component)?;
    identify_world(&resolve, world)
}

/// Decodes a component's WIT and summarises it.
pub fn summarize(component: &[u8]) -> Result<ComponentSummary, BuildError> {
    let (resolve, world_id) = decode(component)?;
    let identified = identify_world(&resolve, world_id).ok();
    let world = &resolve.worlds[world_id];
    let exports = world
        .exports
        .keys()
        .map(|k| resolve.name_world_key(k))
        .collect();
    let all = imports(component)?;
    let imports = all
        .iter()
        .filter(|i| i.has_functions)
        .map(|i| i.name.clone())
        .collect();
    Ok(ComponentSummary {
        world: identified.as_ref().map(|(w, _)| w.clone()),
        wit_package: identified.map(|(_, p)| p),
        capabilities: crate::requested_capabilities(&all),
        imports,
        exports,
        source_digest: read_source_digest(component)?,
        component_digest: bl_core::Sha256Digest::of(component).to_string(),
    })
}
