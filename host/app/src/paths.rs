//! Where bl looks for things on this machine.

use std::path::{Path, PathBuf};

/// Where bl keeps keys by default: `$XDG_CONFIG_HOME/bl/keys`, else
/// `~/.config/bl/keys` (`None`: neither is set).
pub fn keys_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|base| base.join("bl/keys"))
}

/// Directories searched for `<name>.wasm` when a plugin is named rather than
/// given as a path: each entry of `BL_PLUGIN_PATH`, then the directories
/// shipped beside the `bl` executable (`<exe dir>/plugins`,
/// `<exe dir>/../plugins`, `<exe dir>/../lib/bl/plugins`), then the
/// `target/plugins` of the checkout this `bl` was built from, so a copy of
/// the binary elsewhere still finds the plugins `scripts/dev setup` built.
pub fn plugin_search_path() -> Vec<PathBuf> {
    shipped_dirs("BL_PLUGIN_PATH", "plugins")
}

/// The directories of the plugins that ship with bl itself: those beside
/// the `bl` executable, and this checkout's `target/plugins` only when this
/// `bl` is the one built in it (a copy elsewhere trusts only what is beside
/// it). Their components are trusted as the executable beside them is.
pub fn bundled_plugin_dirs() -> Vec<PathBuf> {
    let exe = std::env::current_exe().and_then(|e| e.canonicalize()).ok();
    let mut dirs = beside_exe("plugins");
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if let (Ok(checkout), Some(exe)) = (checkout.canonicalize(), &exe)
        && exe.starts_with(checkout.join("target"))
    {
        dirs.push(checkout.join("target/plugins"));
    }
    dirs
}

/// Where the registry shipped with bl is looked for: `registry` beside
/// bl, above it, under `lib/bl`, then this checkout's own.
pub fn registry_search_path() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        dirs.push(exe_dir.join("registry"));
        dirs.push(exe_dir.join("../registry"));
        dirs.push(exe_dir.join("../lib/bl/registry"));
    }
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../registry"));
    dirs
}

/// Directories searched for the wasm modules bl's pages run in the
/// browser (the studio's linter): as for plugins, with `pages` in place of
/// `plugins` and `BL_PAGE_MODULE_PATH` first.
pub fn page_module_search_path() -> Vec<PathBuf> {
    shipped_dirs("BL_PAGE_MODULE_PATH", "pages")
}

/// `<exe dir>/<leaf>`, `<exe dir>/../<leaf>` and `<exe dir>/../lib/bl/<leaf>`:
/// where an installation puts what ships with bl.
fn beside_exe(leaf: &str) -> Vec<PathBuf> {
    let exe = std::env::current_exe().ok();
    let Some(exe_dir) = exe.as_deref().and_then(Path::parent) else {
        return Vec::new();
    };
    vec![
        exe_dir.join(leaf),
        exe_dir.join("..").join(leaf),
        exe_dir.join("../lib/bl").join(leaf),
    ]
}

/// `$env_var`'s entries, then `<exe dir>/<leaf>`, `<exe dir>/../<leaf>`,
/// `<exe dir>/../lib/bl/<leaf>`, then this checkout's `target/<leaf>`.
fn shipped_dirs(env_var: &str, leaf: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os(env_var)
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    dirs.extend(beside_exe(leaf));
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(leaf);
    if let Ok(checkout) = checkout.canonicalize()
        && !dirs
            .iter()
            .any(|d| d.canonicalize().ok().as_ref() == Some(&checkout))
    {
        dirs.push(checkout);
    }
    dirs
}

/// The compiled-component cache: `BL_CACHE_DIR`, else `$XDG_CACHE_HOME/bl`,
/// else `~/.cache/bl`; components live under `components/`.
pub fn component_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("BL_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("bl")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/bl")))?;
    Some(base.join("components"))
}

/// Reads at most `limit + 1` bytes of `path`, so a caller can refuse a file
/// over `limit` without holding more of it than that. A FIFO, socket or
/// device is refused without being read: the open does not block, and the
/// type is checked on what was opened.
pub fn read_capped(path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_fifo() || kind.is_socket() || kind.is_char_device() || kind.is_block_device() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket or device is never read)",
        ));
    }
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}
