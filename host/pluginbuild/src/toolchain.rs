//! Finding a toolchain that can build `wasm32-unknown-unknown` on this machine.
//!
//! Two paths are supported, in this order:
//! - **rustup**: the active rustup toolchain has the wasm target installed
//!   (`rustup target add wasm32-unknown-unknown`). A plain cargo build works.
//! - **debian**: rustup cannot fetch targets here, so Debian's `rustc-web`
//!   toolchain builds `std` for wasm from its shipped source (`rust-web-src`)
//!   with `-Zbuild-std`, linking with `wasm-ld-19` (package `lld-19`).
//!
//! `BL_WASM_TOOLCHAIN=rustup|debian` forces one path.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const TARGET: &str = "wasm32-unknown-unknown";

const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_LINKERS: [&str; 2] = ["wasm-ld-19", "wasm-ld"];
const FIX: &str = "run `scripts/dev setup` (it installs what is missing), or by hand either \
`rustup target add wasm32-unknown-unknown` or \
`apt-get install rustc-web cargo-web rust-web-src lld-19`";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WasmToolchain {
    Rustup {
        cargo: PathBuf,
    },
    Debian {
        cargo: PathBuf,
        rustc: PathBuf,
        linker: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    #[error("no wasm toolchain: {missing}. To fix: {FIX}")]
    Missing { missing: String },
    #[error("BL_WASM_TOOLCHAIN={0} is not one of `rustup`, `debian`")]
    UnknownChoice(String),
    #[error("could not start {program}: {message}. To fix: {FIX}")]
    Spawn { program: String, message: String },
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

fn sysroot(rustc: &Path) -> Option<PathBuf> {
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .env_remove("RUSTC")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The part of a toolchain path this machine lacks, and the package that
/// brings it.
#[derive(Debug, thiserror::Error)]
enum MissingPart {
    #[error("{0} is not on PATH")]
    NotOnPath(&'static str),
    #[error("`{0} --print sysroot` failed")]
    NoSysroot(&'static str),
    #[error("the rust toolchain at {} has no {TARGET} target", .0.display())]
    NoTarget(PathBuf),
    #[error("{path} is missing (package {package})")]
    File {
        path: &'static str,
        package: &'static str,
    },
    #[error("the standard library source is missing under {} (package rust-web-src)", .0.display())]
    NoStdSource(PathBuf),
    #[error("no wasm linker (wasm-ld-19) on PATH (package lld-19)")]
    NoLinker,
}

fn detect_rustup() -> Result<WasmToolchain, MissingPart> {
    let rustc = on_path("rustc").ok_or(MissingPart::NotOnPath("rustc"))?;
    let cargo = on_path("cargo").ok_or(MissingPart::NotOnPath("cargo"))?;
    let sysroot = sysroot(&rustc).ok_or(MissingPart::NoSysroot("rustc"))?;
    if sysroot
        .join("lib/rustlib")
        .join(TARGET)
        .join("lib")
        .is_dir()
    {
        Ok(WasmToolchain::Rustup { cargo })
    } else {
        Err(MissingPart::NoTarget(sysroot))
    }
}

fn detect_debian() -> Result<WasmToolchain, MissingPart> {
    let rustc = PathBuf::from(DEBIAN_RUSTC);
    let cargo = PathBuf::from(DEBIAN_CARGO);
    if !rustc.is_file() {
        return Err(MissingPart::File {
            path: DEBIAN_RUSTC,
            package: "rustc-web",
        });
    }
    if !cargo.is_file() {
        return Err(MissingPart::File {
            path: DEBIAN_CARGO,
            package: "cargo-web",
        });
    }
    let sysroot = sysroot(&rustc).ok_or(MissingPart::NoSysroot(DEBIAN_RUSTC))?;
    if !sysroot.join("lib/rustlib/src/rust/library/std").is_dir() {
        return Err(MissingPart::NoStdSource(sysroot));
    }
    let linker = DEBIAN_LINKERS
        .iter()
        .find(|l| on_path(l).is_some())
        .ok_or(MissingPart::NoLinker)?;
    Ok(WasmToolchain::Debian {
        cargo,
        rustc,
        linker: linker.to_string(),
    })
}

impl WasmToolchain {
    /// Finds a working toolchain, honouring `BL_WASM_TOOLCHAIN`.
    pub fn detect() -> Result<Self, ToolchainError> {
        match std::env::var("BL_WASM_TOOLCHAIN").ok().as_deref() {
            Some("rustup") => detect_rustup().map_err(|part| ToolchainError::Missing {
                missing: part.to_string(),
            }),
            Some("debian") => detect_debian().map_err(|part| ToolchainError::Missing {
                missing: part.to_string(),
            }),
            None | Some("") | Some("auto") => detect_rustup().or_else(|rustup| {
                detect_debian().map_err(|debian| ToolchainError::Missing {
                    missing: format!("rustup path: {rustup}; Debian path: {debian}"),
                })
            }),
            Some(other) => Err(ToolchainError::UnknownChoice(other.to_string())),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            WasmToolchain::Rustup { .. } => "rustup",
            WasmToolchain::Debian { .. } => "debian",
        }
    }

    /// Each toolchain builds into its own target subdirectory: two compilers
    /// sharing one would rebuild everything every time.
    pub fn target_subdir(&self) -> &'static str {
        self.name()
    }

    pub fn cargo_path(&self) -> &Path {
        match self {
            WasmToolchain::Rustup { cargo } | WasmToolchain::Debian { cargo, .. } => cargo,
        }
    }

    /// `cargo metadata` for one crate's workspace, which writes or brings
    /// up to date its Cargo.lock: run before the source digest is taken, so
    /// the build that follows never changes the digest by rewriting it.
    pub fn cargo_resolve(&self, manifest: &Path) -> Command {
        let mut cmd = self.cargo();
        cmd.args(["metadata", "--format-version", "1", "--manifest-path"])
            .arg(manifest)
            .stdout(std::process::Stdio::null());
        cmd
    }

    /// `cargo build --release --target wasm32-unknown-unknown` for one crate,
    /// with an environment cleaned of whatever an outer cargo set.
    pub fn cargo_build(&self, manifest: &Path, target_dir: &Path) -> Command {
        let mut cmd = self.cargo();
        cmd.args(["build", "--release", "--target", TARGET, "--manifest-path"])
            .arg(manifest)
            .arg("--target-dir")
            .arg(target_dir);
        if let WasmToolchain::Debian { rustc, linker, .. } = self {
            cmd.arg("-Zbuild-std=std,panic_abort")
                .env("RUSTC", rustc)
                // Lets Debian's stable compiler accept -Zbuild-std.
                .env("RUSTC_BOOTSTRAP", "1")
                .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", linker)
                .env_remove("RUSTUP_TOOLCHAIN");
        }
        cmd
    }

    /// This toolchain's cargo, in an environment cleaned of what an outer
    /// cargo set.
    fn cargo(&self) -> Command {
        let mut cmd = Command::new(self.cargo_path());
        // An outer `cargo test` or `cargo run` exports these for its own
        // toolchain; they must not leak into the wasm build.
        for var in [
            "RUSTC",
            "RUSTC_WRAPPER",
            "RUSTFLAGS",
            "CARGO_BUILD_TARGET",
            "CARGO_TARGET_DIR",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_MAKEFLAGS",
            "RUSTDOCFLAGS",
        ] {
            cmd.env_remove(var);
        }
        // Plugins have no randomness capability: crates that want OS entropy
        // (hash-map seeds) get the SDK's fixed source instead of failing to build.
        // Where cargo keeps downloaded crates differs between machines and
        // lands in panic messages: named alike everywhere, a rebuild from
        // the same source and toolchain gives the same bytes.
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")));
        let mut flags = "--cfg getrandom_backend=\"custom\"".to_string();
        if let Some(home) = cargo_home.filter(|h| !h.to_string_lossy().contains(' ')) {
            flags.push_str(&format!(" --remap-path-prefix={}=/cargo", home.display()));
        }
        cmd.env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", flags);
        cmd
    }
}

/// The doctor's line for this machine's wasm toolchain.
pub fn doctor_check() -> bl_core::health::Check {
    use bl_core::health::Check;
    match WasmToolchain::detect() {
        Ok(t) => Check::ok("wasm toolchain", format!("{} can build plugins", t.name())),
        Err(e) => Check::warn(
            "wasm toolchain",
            e.to_string(),
            "run `scripts/dev setup`; only building plugins needs it, running them does not",
        ),
    }
}
