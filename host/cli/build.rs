//! Stamps `bl --version` with the commit it was built from (`unknown`
//! outside a git checkout, as in a source tarball), and links `bl` at a
//! fixed address on Linux.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let commit =
        git(&root, &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BL_COMMIT={commit}");
    // Built again when HEAD moves: a commit, a checkout, a pull.
    if let Some(dir) = git(&root, &["rev-parse", "--git-dir"]) {
        let dir = root.join(PathBuf::from(dir));
        for watched in ["HEAD", "refs", "packed-refs"] {
            println!("cargo:rerun-if-changed={}", dir.join(watched).display());
        }
    }
    // A position-independent bl spends about 0.4 ms of every start (and
    // its watchdog's) relocating 74,000 pointers, copying each page they
    // sit on: linked at a fixed address it maps them as they are. Shared
    // libraries, the heap and the stacks stay randomised.
    // (Not for musl: its static build is position-independent, and its
    // start-up code relocates the binary itself.)
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
