//! The bubblewrap argv for the caged tiers.
//!
//! - `process_restricted`: the host's file system as it is, no network, its
//!   own processes and /proc, a new session, no capabilities.
//! - `container_restricted`: the system directories read-only, nothing else
//!   of the host visible, the workspace the only writable bind (read-only
//!   when the caller asks), protected paths in it (`.git`) read-only, a
//!   private /tmp and HOME, its own /proc and /dev, every namespace
//!   unshared, no further user namespaces, a new session (no TIOCSTI into
//!   the caller's terminal), die-with-parent, and no capabilities.
//!
//! Both mask /proc as runc and Docker do (`/proc/sys` and its kin
//! read-only, `/proc/kcore`, `/proc/keys` and the like hidden) and, where
//! /sys is visible at all, make it read-only with `/sys/firmware` hidden.

use std::path::{Path, PathBuf};

use bl_core::CommandError;

use crate::Tier;

/// Paths inside a workspace that no command may write.
pub const PROTECTED: &[&str] = &[".git"];

/// System directories a caged command sees, read-only, when they exist.
pub(crate) const SYSTEM_DIRS: &[&str] =
    &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"];

/// What runc and Docker make read-only in a container's /proc: kernel
/// tunables, the magic SysRq key, interrupt routing, buses and file-system
/// settings.
pub const READ_ONLY_PROC: &[&str] = &[
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
];

/// What runc and Docker hide: kernel memory, the keyring, timers and
/// scheduler internals that leak host activity, hardware tables, firmware.
pub const HIDDEN: &[&str] = &[
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/scsi",
    "/proc/acpi",
    "/proc/asound",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The container tier's HOME inside the cage.
pub(crate) const CONTAINER_HOME: &str = "/home/sandbox";

/// A path of the host shown again inside a cage.
pub(crate) struct Shown {
    /// Where bwrap binds it from (a staged clone when bl runs as root).
    pub source: PathBuf,
    pub inside: PathBuf,
    pub writable: bool,
}

/// Where the egress bridge sits inside the sandbox.
pub const PROXY_SOCKET_INSIDE: &str = "/run/bl/egress.sock";
pub const BRIDGE_BINARY_INSIDE: &str = "/run/bl/bl";
pub const PROXY_LISTEN_INSIDE: &str = "127.0.0.1:3128";

/// Everything the argv depends on.
pub(crate) struct Cage<'a> {
    pub tier: Tier,
    /// The workspace's real path: where the command sees it.
    pub workspace: &'a Path,
    /// Where bwrap binds it from (a staging mount when bl runs as root).
    pub workspace_source: &'a Path,
    pub writable: bool,
    /// HOME and TMPDIR's parent, given a private tmpfs in process_restricted.
    pub private_root: &'a Path,
    /// The egress bridge's socket and binary, as bwrap can reach them.
    pub egress: Option<(&'a Path, &'a Path)>,
    /// Directories the process tier covers with an empty tmpfs (the run's
    /// own directory).
    pub hidden: &'a [PathBuf],
    /// Directories the process tier covers first, outermost, for what is
    /// shown again inside them: the operator's home, and directories the
    /// caged user could not pass through.
    pub covered: &'a [PathBuf],
    /// Paths shown again inside (lent home paths, the program).
    pub shown: &'a [Shown],
    /// Symlinks made inside: (target, link).
    pub links: &'a [(PathBuf, PathBuf)],
}

impl Cage<'_> {
    /// The binds and symlinks that show paths again, after the covers.
    fn show(&self, args: &mut Vec<String>) {
        for shown in self.shown {
            let bind = if shown.writable {
                "--bind"
            } else {
                "--ro-bind"
            };
            push(
                args,
                &[
                    bind,
                    &shown.source.display().to_string(),
                    &shown.inside.display().to_string(),
                ],
            );
        }
        for (target, link) in self.links {
            push(
                args,
                &[
                    "--symlink",
                    &target.display().to_string(),
                    &link.display().to_string(),
                ],
            );
        }
    }
}

fn push(args: &mut Vec<String>, items: &[&str]) {
    args.extend(items.iter().map(|s| s.to_string()));
}

/// The argv for bwrap up to and including `--`.
pub(crate) fn args(cage: &Cage) -> Result<Vec<String>, CommandError> {
    let ws = cage.workspace.display().to_string();
    let source = cage.workspace_source.display().to_string();
    let bind = if cage.writable { "--bind" } else { "--ro-bind" };
    let mut args = Vec::new();
    match cage.tier {
        Tier::ProcessRestricted => {
            push(&mut args, &["--dev-bind", "/", "/"]);
            let private = cage.private_root.display().to_string();
            push(&mut args, &["--tmpfs", &private]);
            push(&mut args, &["--dir", &format!("{private}/home")]);
            push(&mut args, &["--dir", &format!("{private}/tmp")]);
            // Covers first, outermost; then what is shown again inside
            // them; then the run's hidden directories not already covered.
            for dir in cage.covered {
                push(&mut args, &["--tmpfs", &dir.display().to_string()]);
            }
            // What is shown again goes before the run's hidden directories:
            // should one lie below a shown path, it is still hidden.
            cage.show(&mut args);
            for dir in cage.hidden {
                if !cage.covered.iter().any(|c| dir.starts_with(c)) {
                    push(&mut args, &["--tmpfs", &dir.display().to_string()]);
                }
            }
            let covers_workspace = cage
                .covered
                .iter()
                .chain(cage.hidden)
                .any(|c| cage.workspace.starts_with(c));
            if cage.workspace_source != cage.workspace || !cage.writable || covers_workspace {
                // Staged, read-only, or back from under a cover.
                push(&mut args, &[bind, &source, &ws]);
            }
            push(
                &mut args,
                &[
                    "--unshare-user",
                    "--disable-userns",
                    "--unshare-net",
                    "--unshare-pid",
                    "--proc",
                    "/proc",
                    "--new-session",
                    "--die-with-parent",
                    "--cap-drop",
                    "ALL",
                ],
            );
            mask(&mut args, true);
        }
        Tier::ContainerRestricted => {
            for dir in SYSTEM_DIRS {
                let path = Path::new(dir);
                if let Ok(meta) = std::fs::symlink_metadata(path) {
                    if meta.file_type().is_symlink() {
                        let target = std::fs::read_link(path)
                            .map_err(|e| CommandError::Denied(e.to_string()))?;
                        push(
                            &mut args,
                            &["--symlink", &target.display().to_string(), dir],
                        );
                    } else {
                        push(&mut args, &["--ro-bind", dir, dir]);
                    }
                }
            }
            push(
                &mut args,
                &[
                    "--proc",
                    "/proc",
                    "--dev",
                    "/dev",
                    "--tmpfs",
                    "/tmp",
                    "--tmpfs",
                    "/home",
                    "--dir",
                    CONTAINER_HOME,
                    "--unshare-all",
                    "--unshare-user",
                    "--disable-userns",
                    "--new-session",
                    "--die-with-parent",
                    "--cap-drop",
                    "ALL",
                ],
            );
            mask(&mut args, false);
            cage.show(&mut args);
            push(&mut args, &[bind, &source, &ws]);
            for protected in PROTECTED {
                let path = cage.workspace.join(protected);
                if let Ok(meta) = std::fs::symlink_metadata(&path) {
                    if meta.file_type().is_symlink() {
                        return Err(CommandError::Denied(format!(
                            "{} is a symlink; a protected path must be a real directory",
                            path.display()
                        )));
                    }
                    let from = cage.workspace_source.join(protected).display().to_string();
                    push(
                        &mut args,
                        &["--ro-bind", &from, &path.display().to_string()],
                    );
                }
            }
            push(
                &mut args,
                &[
                    "--setenv",
                    "HOME",
                    CONTAINER_HOME,
                    "--setenv",
                    "TMPDIR",
                    "/tmp",
                ],
            );
        }
        Tier::WorkspaceOnly | Tier::CustomerManagedWorker => unreachable!("not caged"),
    }
    // The egress bridge: in the container tier its socket and binary are
    // bound in at fixed places; the process tier sees the host's tree, so
    // they are used where they are (bl's staging, for a caged user).
    let bridge = match (cage.egress, cage.tier) {
        (None, _) => None,
        (Some((socket, binary)), Tier::ContainerRestricted) => {
            push(
                &mut args,
                &[
                    "--dir",
                    "/run/bl",
                    "--bind",
                    &socket.display().to_string(),
                    PROXY_SOCKET_INSIDE,
                    "--ro-bind",
                    &binary.display().to_string(),
                    BRIDGE_BINARY_INSIDE,
                ],
            );
            Some((
                PROXY_SOCKET_INSIDE.to_string(),
                BRIDGE_BINARY_INSIDE.to_string(),
            ))
        }
        (Some((socket, binary)), Tier::ProcessRestricted) => {
            Some((socket.display().to_string(), binary.display().to_string()))
        }
        (Some(_), tier) => {
            return Err(CommandError::Denied(format!(
                "an egress bridge needs a caged tier, not {}",
                tier.name()
            )));
        }
    };
    push(&mut args, &["--chdir", &ws, "--"]);
    if let Some((socket, binary)) = &bridge {
        args.push(binary.clone());
        args.extend(bridge_args(socket));
    }
    Ok(args)
}

/// The egress bridge's arguments after its program, up to the `--` that
/// precedes the command it runs: it listens inside the cage and forwards
/// to the proxy's `socket`.
pub(crate) fn bridge_args(socket: &str) -> Vec<String> {
    [
        "sandbox",
        "bridge",
        "--socket",
        socket,
        "--listen",
        PROXY_LISTEN_INSIDE,
        "--",
    ]
    .map(String::from)
    .to_vec()
}

/// The /proc (and, with `mask_sys`, /sys) masks. Only paths this kernel
/// has are masked: the sandbox's /proc is the same kernel's.
fn mask(args: &mut Vec<String>, mask_sys: bool) {
    if mask_sys {
        push(args, &["--ro-bind", "/sys", "/sys"]);
    }
    for path in READ_ONLY_PROC {
        if Path::new(path).exists() {
            push(args, &["--ro-bind", path, path]);
        }
    }
    for path in HIDDEN {
        if path.starts_with("/sys/") && !mask_sys {
            continue;
        }
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => {
                push(args, &["--tmpfs", path, "--remount-ro", path]);
            }
            Ok(_) => push(args, &["--ro-bind", "/dev/null", path]),
            Err(_) => {}
        }
    }
}

/// The first directory above `path` that `uid`/`gid` may not search.
pub(crate) fn first_unsearchable_ancestor(path: &Path, uid: u32, gid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
    ancestors.reverse();
    ancestors.into_iter().find_map(|dir| {
        let meta = std::fs::metadata(dir).ok()?;
        let mode = meta.mode();
        let searchable = if meta.uid() == uid {
            mode & 0o100 != 0
        } else if meta.gid() == gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        (!searchable).then(|| dir.to_path_buf())
    })
}
