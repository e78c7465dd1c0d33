//! Host-side bindings for the `bl:plugin` worlds. The interfaces are
//! generated once (with the gate world) and shared by the other worlds, so
//! every world speaks the same Rust types.

pub mod gate {
    wasmtime::component::bindgen!({
        path: "../../wit/plugin",
        world: "gate",
        with: { "bl:plugin/workspace.dir": crate::workspace::WorkspaceDir },
        imports: { default: trappable },
    });
}

pub mod contract {
    wasmtime::component::bindgen!({
        path: "../../wit/plugin",
        world: "completion-contract",
        with: {
            "bl:plugin/types": super::gate::bl::plugin::types,
            "bl:plugin/workspace": super::gate::bl::plugin::workspace,
            "bl:plugin/log": super::gate::bl::plugin::log,
        },
        imports: { default: trappable },
    });
}

pub mod transform {
    wasmtime::component::bindgen!({
        path: "../../wit/plugin",
        world: "transform",
        with: {
            "bl:plugin/types": super::gate::bl::plugin::types,
            "bl:plugin/log": super::gate::bl::plugin::log,
            "bl:plugin/artifacts.input-set": crate::artifacts::InputSet,
            "bl:plugin/artifacts.output-sink": crate::artifacts::OutputSink,
        },
        imports: { default: trappable },
    });
}

pub mod policy {
    wasmtime::component::bindgen!({
        path: "../../wit/plugin",
        world: "publication-policy",
        with: {
            "bl:plugin/types": super::gate::bl::plugin::types,
            "bl:plugin/log": super::gate::bl::plugin::log,
        },
        imports: { default: trappable },
    });
}

pub use gate::bl::plugin::{command, log, types, workspace};
pub use transform::bl::plugin::artifacts;
