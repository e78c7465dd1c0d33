//! The `log` capability: structured lines the host keeps with the
//! invocation's record. Calling any of these makes a plugin request `log`.

use crate::bindings::gate::bl::plugin::log::Level;

/// One structured line at `level`, with `fields` as key-value pairs.
/// Natively it goes to stderr.
pub fn emit(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    #[cfg(target_arch = "wasm32")]
    crate::bindings::gate::bl::plugin::log::emit(level, message, &fields);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message} {fields:?}");
}

/// [`emit`] at level info.
pub fn info(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Info, message, fields);
}

/// [`emit`] at level warn.
pub fn warn(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Warn, message, fields);
}
