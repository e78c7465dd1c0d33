//! The isolation tiers, and bubblewrap as the Linux adapter for the ones
//! that need an OS cage.
//!
//! - `workspace_only`: no cage; a scrubbed environment in the workspace.
//! - `process_restricted`: the same inside its own network namespace (no
//!   network at all).
//! - `container_restricted`: the system directories read-only, nothing else
//!   of the host visible, the workspace the only writable bind (read-only
//!   when the caller asks), protected paths in it (`.git`) read-only, a
//!   private /tmp and HOME, its own /proc and /dev, every namespace
//!   unshared, a new session (no TIOCSTI into the caller's terminal),
//!   die-with-parent, all capabilities dropped, no new privileges, and
//!   rlimits on processes and file size.
//! - `customer_managed_worker`: refused here; such nodes run on the
//!   customer's own worker.

use std::path::{Path, PathBuf};
use std::process::Command;

use bl_core::{CommandError, CommandResult, CommandRunner, CommandSpec};

use crate::subprocess::{PrivateDirs, execute, scrub_env};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    WorkspaceOnly,
    ProcessRestricted,
    ContainerRestricted,
    CustomerManagedWorker,
}

impl Tier {
    pub const ALL: [Tier; 4] = [
        Tier::WorkspaceOnly,
        Tier::ProcessRestricted,
        Tier::ContainerRestricted,
        Tier::CustomerManagedWorker,
    ];

    /// The name used in manifests and `--isolation`.
    pub fn name(self) -> &'static str {
        match self {
            Tier::WorkspaceOnly => "workspace_only",
            Tier::ProcessRestricted => "process_restricted",
            Tier::ContainerRestricted => "container_restricted",
            Tier::CustomerManagedWorker => "customer_managed_worker",
        }
    }

    pub fn parse(name: &str) -> Result<Tier, String> {
        Tier::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Tier::ALL.iter().map(|t| t.name()).collect();
                format!(
                    "unknown isolation tier `{name}`; the tiers are {}",
                    names.join(", ")
                )
            })
    }
}

/// Paths inside a workspace that no command may write.
pub const PROTECTED: &[&str] = &[".git"];

/// System directories a caged command sees, read-only, when they exist.
const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"];

/// Runs commands in one isolation tier.
#[derive(Debug, Clone)]
pub struct Sandbox {
    tier: Tier,
    bwrap: Option<PathBuf>,
    egress: Option<EgressBridge>,
}

/// The allowlist posture's way out of a caged network: the host's CONNECT
/// proxy socket, bind-mounted into the sandbox, and the `bl` binary that
/// bridges a loopback port inside the sandbox to it (`bl sandbox bridge`).
#[derive(Debug, Clone)]
pub struct EgressBridge {
    pub proxy_socket: PathBuf,
    pub bridge_binary: PathBuf,
}

/// Where the bridge sits inside the sandbox.
pub const PROXY_SOCKET_INSIDE: &str = "/run/bl/egress.sock";
pub const BRIDGE_BINARY_INSIDE: &str = "/run/bl/bl";
pub const PROXY_LISTEN_INSIDE: &str = "127.0.0.1:3128";

impl Sandbox {
    /// A runner for `tier`, finding bwrap on the usual paths for the tiers
    /// that need it.
    pub fn new(tier: Tier) -> Self {
        let bwrap = ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file());
        Sandbox {
            tier,
            bwrap,
            egress: None,
        }
    }

    /// The same runner, with the sandbox's only network being `bridge`'s
    /// proxy (container_restricted only: the other tiers share too much of
    /// the host to give a guarantee).
    pub fn with_egress(mut self, bridge: EgressBridge) -> Self {
        self.egress = Some(bridge);
        self
    }

    /// A runner that uses the bwrap at `bwrap` (`None`: this machine has none).
    pub fn with_bwrap(tier: Tier, bwrap: Option<PathBuf>) -> Self {
        Sandbox {
            tier,
            bwrap: bwrap.filter(|p| p.is_file()),
            egress: None,
        }
    }

    pub fn tier(&self) -> Tier {
        self.tier
    }

    fn bwrap(&self) -> Result<&Path, CommandError> {
        self.bwrap.as_deref().ok_or_else(|| {
            CommandError::Denied(format!(
                "the {} tier needs bubblewrap, which is not installed: install the `bubblewrap` package \
                 (or run `scripts/dev setup`), or choose the workspace_only tier",
                self.tier.name()
            ))
        })
    }

    /// The bwrap argv (up to `--`) for `spec`.
    fn cage_args(&self, spec: &CommandSpec) -> Result<Vec<String>, CommandError> {
        let ws = spec.workspace.canonicalize().map_err(|e| {
            CommandError::Denied(format!("workspace {}: {e}", spec.workspace.display()))
        })?;
        let ws_s = ws.display().to_string();
        let mut args: Vec<String> = Vec::new();
        let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
        match self.tier {
            Tier::ProcessRestricted => {
                push(&["--dev-bind", "/", "/", "--unshare-net", "--die-with-parent"]);
            }
            Tier::ContainerRestricted => {
                for dir in SYSTEM_DIRS {
                    let path = Path::new(dir);
                    if let Ok(meta) = std::fs::symlink_metadata(path) {
                        if meta.file_type().is_symlink() {
                            let target = std::fs::read_link(path)
                                .map_err(|e| CommandError::Denied(e.to_string()))?;
                            push(&["--symlink", &target.display().to_string(), dir]);
                        } else {
                            push(&["--ro-bind", dir, dir]);
                        }
                    }
                }
                push(&[
                    "--proc",
                    "/proc",
                    "--dev",
                    "/dev",
                    "--tmpfs",
                    "/tmp",
                    "--tmpfs",
                    "/home",
                    "--dir",
                    "/home/sandbox",
                    "--unshare-all",
                    "--new-session",
                    "--die-with-parent",
                    "--cap-drop",
                    "ALL",
                ]);
                let bind = if spec.workspace_writable {
                    "--bind"
                } else {
                    "--ro-bind"
                };
                push(&[bind, &ws_s, &ws_s]);
                for protected in PROTECTED {
                    let path = ws.join(protected);
                    if let Ok(meta) = std::fs::symlink_metadata(&path) {
                        if meta.file_type().is_symlink() {
                            return Err(CommandError::Denied(format!(
                                "{} is a symlink; a protected path must be a real directory",
                                path.display()
                            )));
                        }
                        let p = path.display().to_string();
                        push(&["--ro-bind", &p, &p]);
                    }
                }
                push(&[
                    "--setenv",
                    "HOME",
                    "/home/sandbox",
                    "--setenv",
                    "TMPDIR",
                    "/tmp",
                ]);
            }
            Tier::WorkspaceOnly | Tier::CustomerManagedWorker => unreachable!("not caged"),
        }
        if let Some(bridge) = &self.egress {
            if self.tier != Tier::ContainerRestricted {
                return Err(CommandError::Denied(format!(
                    "the allowlist egress posture needs the container_restricted tier, not {}",
                    self.tier.name()
                )));
            }
            let socket = bridge.proxy_socket.display().to_string();
            let binary = bridge.bridge_binary.display().to_string();
            push(&[
                "--dir",
                "/run/bl",
                "--bind",
                &socket,
                PROXY_SOCKET_INSIDE,
                "--ro-bind",
                &binary,
                BRIDGE_BINARY_INSIDE,
            ]);
        }
        push(&["--chdir", &ws_s, "--"]);
        if self.egress.is_some() {
            push(&[
                BRIDGE_BINARY_INSIDE,
                "sandbox",
                "bridge",
                "--socket",
                PROXY_SOCKET_INSIDE,
                "--listen",
                PROXY_LISTEN_INSIDE,
                "--",
            ]);
        }
        Ok(args)
    }
}

impl CommandRunner for Sandbox {
    fn name(&self) -> &str {
        self.tier.name()
    }

    fn run(&self, spec: &CommandSpec) -> Result<CommandResult, CommandError> {
        if spec.argv.is_empty() {
            return Err(CommandError::Denied("the argv is empty".into()));
        }
        match self.tier {
            Tier::WorkspaceOnly => return crate::Subprocess.run(spec),
            Tier::CustomerManagedWorker => {
                return Err(CommandError::Denied(
                    "customer_managed_worker nodes run on the customer's own worker, never on this host; \
                     register that worker or choose another tier"
                        .into(),
                ));
            }
            Tier::ProcessRestricted | Tier::ContainerRestricted => {}
        }
        #[cfg(target_os = "macos")]
        {
            return run_seatbelt(self.tier, spec);
        }
        #[allow(unreachable_code)]
        let bwrap = self.bwrap()?;
        let private = PrivateDirs::new()?;
        // The filter file stays open until the command ends: bwrap reads it
        // through `--seccomp FD`, which must precede the other options.
        let filter = match self.tier {
            Tier::ContainerRestricted => Some(seccomp_filter_file()?),
            _ => None,
        };
        let mut command = Command::new(bwrap);
        if let Some(filter) = &filter {
            let fd = std::os::fd::AsRawFd::as_raw_fd(filter);
            command.arg("--seccomp").arg(fd.to_string());
            limit_resources(&mut command, fd);
        }
        command
            .args(self.cage_args(spec)?)
            .args(&spec.argv)
            .current_dir(&spec.workspace);
        scrub_env(&mut command, &private.home, &private.tmp);
        execute(command, spec)
    }
}

/// rlimits inherited by bwrap and everything it starts: a cap on processes
/// (fork bombs) and on the size of any file written (disk filling). Also
/// lets the seccomp filter's descriptor survive into bwrap.
fn limit_resources(command: &mut Command, filter_fd: i32) {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    use nix::sys::resource::{Resource, setrlimit};
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit and fcntl are async-signal-safe; nothing else runs
    // between fork and exec.
    unsafe {
        command.pre_exec(move || {
            setrlimit(Resource::RLIMIT_NPROC, 4096, 4096).map_err(std::io::Error::from)?;
            setrlimit(Resource::RLIMIT_FSIZE, 1 << 30, 1 << 30).map_err(std::io::Error::from)?;
            let fd = std::os::fd::BorrowedFd::borrow_raw(filter_fd);
            fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
}

/// The syscalls no caged command may make, answered with EPERM: tracing
/// another process, reading or writing its memory, and pushing characters
/// into a terminal (TIOCSTI).
fn seccomp_program() -> Result<Vec<u8>, String> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp: {e}"))?;
    let tiocsti = SeccompRule::new(vec![
        SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, libc_tiocsti())
            .map_err(|e| format!("seccomp: {e}"))?,
    ])
    .map_err(|e| format!("seccomp: {e}"))?;
    let rules = [
        (nix::libc::SYS_ptrace, vec![]),
        (nix::libc::SYS_process_vm_readv, vec![]),
        (nix::libc::SYS_process_vm_writev, vec![]),
        (nix::libc::SYS_ioctl, vec![tiocsti]),
    ]
    .into_iter()
    .collect();
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(1), arch)
        .map_err(|e| format!("seccomp: {e}"))?;
    let program: BpfProgram = filter.try_into().map_err(|e| format!("seccomp: {e}"))?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for ins in program {
        bytes.extend_from_slice(&ins.code.to_ne_bytes());
        bytes.push(ins.jt);
        bytes.push(ins.jf);
        bytes.extend_from_slice(&ins.k.to_ne_bytes());
    }
    Ok(bytes)
}

// The ioctl request's type differs between targets (u64 here, c_int on some).
#[allow(clippy::unnecessary_cast)]
fn libc_tiocsti() -> u64 {
    nix::libc::TIOCSTI as u64
}

/// The compiled filter in an anonymous file, rewound, for `bwrap --seccomp`.
fn seccomp_filter_file() -> Result<std::fs::File, CommandError> {
    use std::io::{Seek, Write};
    let program = seccomp_program().map_err(CommandError::Denied)?;
    let mut file =
        tempfile::tempfile().map_err(|e| CommandError::Spawn(format!("seccomp filter: {e}")))?;
    file.write_all(&program)
        .and_then(|_| file.rewind())
        .map_err(|e| CommandError::Spawn(format!("seccomp filter: {e}")))?;
    Ok(file)
}

/// macOS: the same tiers through a generated Seatbelt profile.
#[cfg(target_os = "macos")]
fn run_seatbelt(tier: Tier, spec: &CommandSpec) -> Result<CommandResult, CommandError> {
    let private = PrivateDirs::new()?;
    let workspace = spec.workspace.canonicalize().map_err(|e| {
        CommandError::Denied(format!("workspace {}: {e}", spec.workspace.display()))
    })?;
    let profile = crate::seatbelt::profile(tier, &workspace, spec.workspace_writable, &private.tmp)
        .ok_or_else(|| CommandError::Denied(format!("{} has no Seatbelt profile", tier.name())))?;
    let mut command = Command::new("/usr/bin/sandbox-exec");
    command
        .arg("-p")
        .arg(profile)
        .args(&spec.argv)
        .current_dir(&workspace);
    scrub_env(&mut command, &private.home, &private.tmp);
    execute(command, spec)
}
