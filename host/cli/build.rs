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
        link_the_unwinder_statically();
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// Rust's standard library asks for the unwinder as `-lgcc_s`. The shared
/// libgcc_s has a constructor, `__cpu_indicator_init`, that asks the CPU
/// its model with a dozen CPUID instructions at every start, which a
/// virtual machine traps: 0.1 to 0.2 ms of each bl and each watchdog start
/// on these machines. Found first in a directory of ours, `-lgcc_s` links
/// the same unwinder from GCC's static `libgcc_eh.a` instead, without that
/// constructor. Where the compiler has no static unwinder, nothing changes.
fn link_the_unwinder_statically() {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let Some(found) = Command::new(compiler)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|path| path.is_absolute() && path.is_file())
    else {
        return;
    };
    let dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("unwind");
    let link = dir.join("libgcc_s.a");
    std::fs::create_dir_all(&dir).expect("OUT_DIR is writable");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&found, &link).expect("OUT_DIR is writable");
    println!("cargo:rustc-link-search=native={}", dir.display());
}
