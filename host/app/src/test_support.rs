//! What this crate's tests share.

use std::path::Path;
use std::sync::Arc;

/// The first-party plugins `scripts/dev setup` builds; `None` (the test
/// skips) only outside CI, where setup may not have run.
pub(crate) fn first_party_plugins() -> Option<Arc<bl_plugins::PluginHost>> {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plugins/deny-all.wasm");
    if built.is_file() {
        return Some(crate::plugin_host::shared());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing: scripts/dev setup builds it",
        built.display()
    );
    eprintln!("SKIPPED: no {}", built.display());
    None
}
