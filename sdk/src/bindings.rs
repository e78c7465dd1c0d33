//! The generated guest bindings, one module per world. The interfaces are
//! generated once (with `gate`) and shared, so every world speaks the same
//! Rust types. Each module only describes imports; a world's exports are
//! described by its `export_*!` macro, in the plugin crate that uses it.

pub mod gate {
    wit_bindgen::generate!({
        path: "../wit/plugin",
        world: "gate",
        pub_export_macro: true,
        export_macro_name: "__export_gate_world",
        default_bindings_module: "bl_plugin_sdk::bindings::gate",
    });
}

pub mod contract {
    wit_bindgen::generate!({
        path: "../wit/plugin",
        world: "completion-contract",
        with: {
            "bl:plugin/types@1.1.0": bl_plugin_sdk::bindings::gate::bl::plugin::types,
            "bl:plugin/workspace@1.1.0": bl_plugin_sdk::bindings::gate::bl::plugin::workspace,
            "bl:plugin/log@1.1.0": bl_plugin_sdk::bindings::gate::bl::plugin::log,
        },
        pub_export_macro: true,
        export_macro_name: "__export_contract_world",
        default_bindings_module: "bl_plugin_sdk::bindings::contract",
    });
}

pub mod transform {
    wit_bindgen::generate!({
        path: "../wit/plugin",
        world: "transform",
        with: {
            "bl:plugin/types@1.1.0": bl_plugin_sdk::bindings::gate::bl::plugin::types,
            "bl:plugin/log@1.1.0": bl_plugin_sdk::bindings::gate::bl::plugin::log,
        },
        pub_export_macro: true,
        export_macro_name: "__export_transform_world",
        default_bindings_module: "bl_plugin_sdk::bindings::transform",
    });
}

pub mod policy {
    wit_bindgen::generate!({
        path: "../wit/plugin",
        world: "publication-policy",
        with: {
            "bl:plugin/types@1.1.0": bl_plugin_sdk::bindings::gate::bl::plugin::types,
            "bl:plugin/log@1.1.0": bl_plugin_sdk::bindings::gate::bl::plugin::log,
        },
        pub_export_macro: true,
        export_macro_name: "__export_policy_world",
        default_bindings_module: "bl_plugin_sdk::bindings::policy",
    });
}
