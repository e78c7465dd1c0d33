//! Builds that give the same bytes on any machine. Cargo names a path
//! dependency outside the plugin's workspace (the SDK) by its absolute
//! path, and that name reaches symbol hashes and so the order of code in
//! the component. So a reproducible build copies the sources to one
//! absolute place, the same everywhere, named by their digest, and builds
//! there.

use std::path::{Component, Path, PathBuf};

use crate::source::source_digest;
use crate::{BuildError, BuildOptions, Built, WasmToolchain, build};

/// Where reproducible builds put their sources.
pub const STAGE_ROOT: &str = "/tmp/bl-reproducible";

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |e| BuildError::Source {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// The deepest directory holding every one of `dirs`.
fn common_ancestor(dirs: &[PathBuf]) -> PathBuf {
    let mut common: Vec<Component> = dirs[0].components().collect();
    for dir in &dirs[1..] {
        let parts: Vec<Component> = dir.components().collect();
        let same = common
            .iter()
            .zip(&parts)
            .take_while(|(a, b)| a == b)
            .count();
        common.truncate(same);
    }
    common.iter().collect()
}

/// Copies `from` into `to`, leaving out what a source digest leaves out
/// (dot files, `target`) and anything that is not a plain file or directory.
fn copy_tree(from: &Path, to: &Path) -> Result<(), BuildError> {
    std::fs::create_dir_all(to).map_err(io_error(to))?;
    for entry in std::fs::read_dir(from).map_err(io_error(from))? {
        let entry = entry.map_err(io_error(from))?;
        let name = entry.file_name();
        let text = name.to_string_lossy();
        if text.starts_with('.') || text == "target" {
            continue;
        }
        let kind = entry.file_type().map_err(io_error(from))?;
        let (source, dest) = (entry.path(), to.join(&name));
        if kind.is_dir() {
            copy_tree(&source, &dest)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &dest).map_err(io_error(&source))?;
        }
    }
    Ok(())
}

/// A fresh, private stage directory for `digest`: a stage left by an
/// earlier build of ours is replaced; one owned by another user refuses.
fn fresh_stage(digest: &str) -> Result<PathBuf, BuildError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let root = Path::new(STAGE_ROOT);
    let me = std::fs::metadata("/proc/self")
        .map_err(io_error(root))?
        .uid();
    match std::fs::DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_error(root)(e)),
    }
    let meta = std::fs::symlink_metadata(root).map_err(io_error(root))?;
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(BuildError::Source {
            path: root.to_path_buf(),
            message: "not a private directory of this user; remove it and build again".into(),
        });
    }
    let stage = root.join(digest.trim_start_matches("sha256:"));
    if stage.exists() {
        std::fs::remove_dir_all(&stage).map_err(io_error(&stage))?;
    }
    Ok(stage)
}

/// Builds the plugin crate at `crate_dir` as [`build`] does, from a copy
/// of its sources at one fixed place, so that the same sources and
/// toolchain give the same component anywhere.
pub fn build_reproducibly(
    crate_dir: &Path,
    toolchain: &WasmToolchain,
    options: &BuildOptions,
) -> Result<Built, BuildError> {
    let sources = source_digest(crate_dir)?;
    let crate_dir = std::path::absolute(crate_dir).map_err(io_error(crate_dir))?;
    let mut tops = vec![sources.root.clone()];
    tops.extend(
        sources
            .dirs
            .iter()
            .filter(|d| !d.starts_with(&sources.root))
            .cloned(),
    );
    let ancestor = common_ancestor(&tops);
    let stage = fresh_stage(&sources.digest)?;
    for top in &tops {
        let rel = top.strip_prefix(&ancestor).unwrap_or(top);
        copy_tree(top, &stage.join(rel))?;
    }
    let staged_crate = stage.join(crate_dir.strip_prefix(&ancestor).unwrap_or(&crate_dir));
    let staged = source_digest(&staged_crate)?;
    if staged.digest != sources.digest {
        return Err(BuildError::Source {
            path: staged_crate,
            message: format!(
                "the copied sources have digest {}, not {}",
                staged.digest, sources.digest
            ),
        });
    }
    let built = build(&staged_crate, toolchain, options);
    let _ = std::fs::remove_dir_all(&stage);
    built
}
