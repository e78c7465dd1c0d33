//! Who a caged command is on the host, and how its workspace stays its own.
//!
//! Run by root, bubblewrap maps root inside its user namespace to root
//! outside, so a caged command could write `/proc/sys` or anything else host
//! root may write. bl never lets that happen: when it runs as root, the caged
//! command runs as an unprivileged host user ([`CagedUser`], 65534 `nobody`
//! unless configured). Before it starts bubblewrap, bl (still root, in the
//! child it forks) enters a private mount namespace and attaches there a
//! clone of the workspace mount at a staging path any user can reach. Where
//! the file system supports it, that clone is an *idmapped mount*: files the
//! workspace's owner owns appear owned by the caged user, and what the caged
//! user writes lands on disk owned by the workspace's owner, with nothing
//! chowned. Elsewhere the workspace is *lent*: chowned to the caged user
//! and given back afterwards ([`LentTree`]). Then, for the container tier,
//! the child drops to the caged user and runs bubblewrap unprivileged, as
//! bubblewrap is meant to run; for the process tier it makes the cage
//! itself (`root_cage`) and execs the command.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bl_core::CommandError;
use nix::libc;

use crate::EgressBridge;

/// The host user and group a caged command runs as when bl runs as root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CagedUser {
    pub uid: u32,
    pub gid: u32,
    /// Lend the workspace with an idmapped mount where the file system has
    /// them (`false`: always chown it and give it back).
    pub idmap: bool,
}

impl Default for CagedUser {
    fn default() -> Self {
        CagedUser::NOBODY
    }
}

/// The variables that choose the caged user.
pub const UID_VAR: &str = "BL_SANDBOX_UID";
pub const GID_VAR: &str = "BL_SANDBOX_GID";
/// `chown` forces lending by chown even where idmapped mounts work.
pub const OWNERSHIP_VAR: &str = "BL_SANDBOX_OWNERSHIP";

impl CagedUser {
    /// The kernel's overflow user, `nobody:nogroup`.
    pub const NOBODY: CagedUser = CagedUser {
        uid: 65534,
        gid: 65534,
        idmap: true,
    };

    /// The caged user from `BL_SANDBOX_UID`, `BL_SANDBOX_GID` and
    /// `BL_SANDBOX_OWNERSHIP` (read through `lookup`), else nobody. Root
    /// (0) is refused: it is exactly what the cage must not be.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<CagedUser, CagedUserError> {
        let id = |var: &'static str, default: u32| -> Result<u32, CagedUserError> {
            let Some(text) = lookup(var) else {
                return Ok(default);
            };
            match text.trim().parse::<u32>() {
                Ok(0) => Err(CagedUserError::Root(var)),
                Ok(u32::MAX) | Err(_) => Err(CagedUserError::NotAnId(var, text)),
                Ok(id) => Ok(id),
            }
        };
        let idmap = match lookup(OWNERSHIP_VAR).as_deref().map(str::trim) {
            None | Some("") | Some("auto") | Some("idmap") => true,
            Some("chown") => false,
            Some(other) => return Err(CagedUserError::Ownership(other.to_string())),
        };
        let gid = id(GID_VAR, CagedUser::NOBODY.gid)?;
        if let Some(name) = privileged_group_name(gid) {
            return Err(CagedUserError::PrivilegedGroup(gid, name));
        }
        Ok(CagedUser {
            uid: id(UID_VAR, CagedUser::NOBODY.uid)?,
            gid,
            idmap,
        })
    }
}

/// A caged user the environment names that bl will not use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CagedUserError {
    #[error(
        "{0}=0: a caged command never runs as host root; choose an unprivileged id such as 65534"
    )]
    Root(&'static str),
    #[error("{0}={1:?} is not a numeric id")]
    NotAnId(&'static str, String),
    #[error("{OWNERSHIP_VAR}={0:?}: use `auto` (an idmapped mount where possible) or `chown`")]
    Ownership(String),
    #[error(
        "{GID_VAR}={0} is the group `{1}`, which grants host privileges (disks, the Docker socket, sudo, logs); choose an unprivileged group such as 65534"
    )]
    PrivilegedGroup(u32, String),
}

/// Groups whose members hold host privileges, by their usual names.
const PRIVILEGED_GROUPS: &[&str] = &[
    "root",
    "wheel",
    "sudo",
    "admin",
    "adm",
    "disk",
    "kmem",
    "shadow",
    "docker",
    "lxd",
    "libvirt",
    "systemd-journal",
];

/// The name `/etc/group` gives `gid`, when it is one of the privileged groups.
fn privileged_group_name(gid: u32) -> Option<String> {
    let groups = std::fs::read_to_string("/etc/group").ok()?;
    groups.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == gid && PRIVILEGED_GROUPS.contains(&name)).then(|| name.to_string())
    })
}

/// Whether bl itself runs as root, and so must not hand that on.
pub fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// How a workspace was made the caged user's for one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lending {
    IdmappedMount,
    Chown,
}

impl Lending {
    pub fn describe(self) -> &'static str {
        match self {
            Lending::IdmappedMount => "an idmapped mount",
            Lending::Chown => "chown, given back afterwards",
        }
    }
}

/// A path of the host shown inside a cage: a lent home path, or the
/// program it runs (or that program's install directory). It is `rel`
/// below `base`, and no name of `rel` may be a symlink: bl resolves it one
/// name at a time, so nothing swapped in on the way is followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lend {
    pub base: PathBuf,
    pub rel: PathBuf,
    pub writable: bool,
}

impl Lend {
    pub fn host(&self) -> PathBuf {
        self.base.join(&self.rel)
    }
}

/// Opens `lend` (an `O_PATH` descriptor) one name at a time below its
/// base, refusing a symlink anywhere in `rel`.
pub(crate) fn open_lend(lend: &Lend) -> Result<OwnedFd, CommandError> {
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::Mode;
    let fail = |e: nix::Error| denied(lend.host().display(), e);
    let mut fd = open(
        &lend.base,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail)?;
    for name in lend.rel.components() {
        let std::path::Component::Normal(name) = name else {
            return Err(denied(
                lend.host().display(),
                "is not a plain path below its base",
            ));
        };
        fd = openat(
            &fd,
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(fail)?;
        let stat = nix::sys::stat::fstat(&fd).map_err(fail)?;
        if stat.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(denied(
                lend.host().display(),
                "holds a symlink; only real files and directories are lent to a cage",
            ));
        }
    }
    Ok(fd)
}

/// A detached copy of the mount at an open `O_PATH` descriptor.
fn clone_mount_at(fd: &OwnedFd, what: &Path) -> Result<OwnedFd, CommandError> {
    let empty = c"";
    // SAFETY: open_tree on a descriptor we own, with an empty path.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_raw_fd(),
            empty.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(denied(
            format!(
                "cannot clone the mount of {} for the cage (open_tree)",
                what.display()
            ),
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the kernel just returned this descriptor to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(tree as RawFd) })
}

/// Everything one caged command run by root needs prepared: the staging
/// directory, the mount clones to attach there, and the lent tree.
pub(crate) struct Staging {
    dir: PathBuf,
    pub user: CagedUser,
    /// Where the workspace appears in the private mount namespace.
    pub workspace: PathBuf,
    pub bridge_binary: Option<PathBuf>,
    pub proxy_socket: Option<PathBuf>,
    /// Where each [`Lend`] appears in the staging directory, in order.
    pub lent: Vec<PathBuf>,
    attach: Vec<(OwnedFd, CString)>,
    lent_tree: Option<LentTree>,
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn c_path(path: &Path) -> Result<CString, CommandError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| CommandError::Denied(format!("{} holds a NUL byte", path.display())))
}

fn denied(what: impl std::fmt::Display, e: impl std::fmt::Display) -> CommandError {
    CommandError::Denied(format!("{what}: {e}"))
}

/// A detached copy of the mount at `path` (open_tree with OPEN_TREE_CLONE).
fn clone_mount(path: &Path) -> Result<OwnedFd, CommandError> {
    let c = c_path(path)?;
    // SAFETY: a plain syscall on a NUL-terminated path; the returned fd is
    // owned by us.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(denied(
            format!(
                "cannot clone the mount of {} for the cage (open_tree)",
                path.display()
            ),
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the kernel just returned this descriptor to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn set_mount_attr(tree: &OwnedFd, attr: &MountAttr) -> std::io::Result<()> {
    let empty = c"";
    // SAFETY: `attr` is a valid mount_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets `attr` on the mount at `path` and every mount below it (one
/// recursive `mount_setattr`). Async-signal-safe: the child calls it.
pub(crate) fn seal_tree(path: &std::ffi::CStr, attr: u64) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: attr,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a mount_attr of the size passed, a C string that outlives
    // the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn make_read_only(tree: &OwnedFd) -> std::io::Result<()> {
    set_mount_attr(
        tree,
        &MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        },
    )
}

/// Whether a caged command must never write this entry, whoever lends it:
/// a regular file with more than one link (another may live outside the
/// workspace) or with a set-id bit (rewritten, it would run with its
/// owner's rights; chown would clear the bit, which must not come back on
/// new content).
fn out_of_reach(stat: &nix::sys::stat::FileStat) -> bool {
    stat.st_mode & libc::S_IFMT == libc::S_IFREG
        && (stat.st_nlink > 1 || stat.st_mode & 0o6000 != 0)
}

/// User namespaces that only carry an idmapping, one per mapping, kept for
/// the life of the process (making one costs a fork).
static IDMAP_NAMESPACES: Mutex<Vec<(IdMapping, OwnedFd)>> = Mutex::new(Vec::new());

/// (owner uid, owner gid, caged uid, caged gid).
type IdMapping = (u32, u32, u32, u32);

/// Idmaps `tree` so that `owner`'s files appear as `user`'s.
fn idmap(tree: &OwnedFd, owner: (u32, u32), user: CagedUser) -> std::io::Result<()> {
    let key = (owner.0, owner.1, user.uid, user.gid);
    let cache = idmap_namespace(key)?;
    let ns = &cache.iter().find(|(k, _)| *k == key).expect("just made").1;
    set_mount_attr(
        tree,
        &MountAttr {
            attr_set: MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: ns.as_raw_fd() as u64,
        },
    )
}

/// The idmapping namespaces, with `key`'s made if it was not.
fn idmap_namespace(
    key: IdMapping,
) -> std::io::Result<std::sync::MutexGuard<'static, Vec<(IdMapping, OwnedFd)>>> {
    let mut cache = IDMAP_NAMESPACES.lock().unwrap_or_else(|e| e.into_inner());
    if !cache.iter().any(|(k, _)| *k == key) {
        let (owner_uid, owner_gid, uid, gid) = key;
        let ns = mapping_namespace(
            &format!("{owner_uid} {uid} 1\n"),
            &format!("{owner_gid} {gid} 1\n"),
        )?;
        cache.push((key, ns));
    }
    Ok(cache)
}

/// Makes the idmapping that lends bl's own files (a scratch workspace bl
/// made) to `user`, so that the first cage does not wait for it.
pub(crate) fn prepare_idmap(user: CagedUser) {
    if user.idmap {
        let key = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
            user.uid,
            user.gid,
        );
        drop(idmap_namespace(key));
    }
}

/// A new user namespace with the given uid and gid maps, as a descriptor.
/// A child started in it (sharing bl's memory, so nothing is copied) waits
/// while we write its maps and open it, then exits.
fn mapping_namespace(uid_map: &str, gid_map: &str) -> std::io::Result<OwnedFd> {
    let child = NamespaceChild::start()?;
    let pid = child.pid;
    let outcome = (|| {
        std::fs::write(format!("/proc/{pid}/uid_map"), uid_map)?;
        std::fs::write(format!("/proc/{pid}/gid_map"), gid_map)?;
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
        Ok(OwnedFd::from(ns))
    })();
    child.release();
    outcome
}

/// A child in a new user namespace that waits for bl, on a pipe, until it
/// is released.
struct NamespaceChild {
    pid: libc::pid_t,
    release: OwnedFd,
    stack: crate::spawn::Stack,
    /// bl stays on its CPU until the child is reaped, so that the child
    /// (which only exits) runs there while bl waits for it.
    pinned: crate::spawn::Pinned,
}

impl NamespaceChild {
    fn start() -> std::io::Result<NamespaceChild> {
        let (done_r, done_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let stack = crate::spawn::Stack::new().map_err(std::io::Error::other)?;
        extern "C" fn wait_for_parent(pipe: *mut libc::c_void) -> libc::c_int {
            let pipe = pipe as usize as u64;
            let (read_end, write_end) = (
                (pipe & 0xffff_ffff) as libc::c_int,
                (pipe >> 32) as libc::c_int,
            );
            let mut byte = 0u8;
            // SAFETY: a close and a read on the descriptors passed in,
            // then _exit; nothing else is touched in the memory it shares
            // with bl. Its own copy of the write end is closed first: if
            // bl exits before it writes, the read ends (end of file),
            // where the child would otherwise wait for ever, holding bl's
            // stdout and stderr open.
            unsafe {
                libc::close(write_end);
                libc::read(read_end, (&mut byte as *mut u8).cast(), 1);
                libc::_exit(0)
            }
        }
        let pipe = (done_r.as_raw_fd() as u32 as u64) | ((done_w.as_raw_fd() as u32 as u64) << 32);
        let pinned = crate::spawn::Pinned::here();
        // SAFETY: the child runs `wait_for_parent` on its own stack, which
        // lives until the child was reaped.
        let pid = unsafe {
            libc::clone(
                wait_for_parent,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD,
                pipe as usize as *mut libc::c_void,
            )
        };
        if pid < 0 {
            return Err(std::io::Error::other(format!(
                "could not make a user namespace for the idmapping: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(NamespaceChild {
            pid,
            release: done_w,
            stack,
            pinned,
        })
    }

    /// Lets the child exit, and reaps it.
    fn release(self) {
        let _ = nix::unistd::write(&self.release, &[1]);
        self.reap();
    }

    /// Reaps the child once it exited.
    fn reap(self) {
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(self.pid), None);
        drop((self.stack, self.pinned));
    }
}

/// How a workspace at `dir` would be lent to `user` (tries an idmapped
/// clone of its mount, which is dropped again). Needs root.
pub fn lending_for(dir: &Path, user: CagedUser) -> Lending {
    let idmapped = user.idmap
        && std::fs::metadata(dir).is_ok_and(|meta| {
            clone_mount(dir).is_ok_and(|tree| idmap(&tree, (meta.uid(), meta.gid()), user).is_ok())
        });
    if idmapped {
        Lending::IdmappedMount
    } else {
        Lending::Chown
    }
}

/// The shared staging directory, made on first use: 0711, so the caged
/// user (running bwrap) reaches the mount points in it.
fn staging_root(root: &std::sync::OnceLock<tempfile::TempDir>) -> Result<&Path, CommandError> {
    if let Some(dir) = root.get() {
        return Ok(dir.path());
    }
    let dir = crate::containment::owned_mount_point_dir("bl-cage-")
        .map_err(|e| denied("cannot make the cage's staging directory", e))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
        .map_err(|e| denied(dir.path().display(), e))?;
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).map_err(|e| denied(workspace.display(), e))?;
    // A thread that loses the race drops (removes) the directory it made.
    Ok(root.get_or_init(|| dir).path())
}

impl Staging {
    /// Prepares the workspace (and the egress bridge's socket and binary)
    /// for a command that runs as `user`.
    ///
    /// `root` is the staging directory, made once and shared by every cage
    /// of one runner: it holds only mount points (`workspace`, and for the
    /// egress bridge `egress.sock` and `bl`), and each cage attaches its
    /// own mounts to them inside its own private mount namespace.
    pub(crate) fn prepare(
        user: CagedUser,
        workspace: &Path,
        writable: bool,
        egress: Option<&EgressBridge>,
        lends: &[Lend],
        root: &std::sync::OnceLock<tempfile::TempDir>,
    ) -> Result<Staging, CommandError> {
        let dir = staging_root(root)?.to_path_buf();
        let meta = std::fs::metadata(workspace).map_err(|e| denied(workspace.display(), e))?;
        let owner = (meta.uid(), meta.gid());
        let staged_workspace = dir.join("workspace");

        let tree = clone_mount(workspace)?;
        if !writable {
            make_read_only(&tree)
                .map_err(|e| denied("cannot make the workspace mount read-only", e))?;
        }
        let lent_tree = if user.idmap {
            idmap(&tree, owner, user).map_err(|e| {
                denied(
                    format!(
                        "cannot lend {} to the caged user (uid {}) through an idmapped mount; this needs Linux 5.12+ \
                         and a file system that supports them (ext4, xfs, btrfs; tmpfs from 6.3)",
                        workspace.display(),
                        user.uid
                    ),
                    format!(
                        "{e}. Move the workspace to such a file system, or set {OWNERSHIP_VAR}=chown to lend it by chown \
                         (every entry's owner is recorded and given back after the command)"
                    ),
                )
            })?;
            None
        } else {
            Some(LentTree::lend(workspace, user)?)
        };
        let mut attach = vec![(tree, c_path(&staged_workspace)?)];
        if user.idmap && writable {
            // Through the idmapped mount, every file of the owner's looks
            // like the caged user's. Two kinds must stay out of its reach:
            // a file with more than one link (another may live outside the
            // workspace) and a set-id file (rewritten, it would run with the
            // owner's rights). Each gets a read-only mount of itself.
            for rel in pinned_files(workspace)? {
                let tree = clone_mount(&workspace.join(&rel))?;
                make_read_only(&tree)
                    .map_err(|e| denied(format!("cannot pin {} read-only", rel.display()), e))?;
                attach.push((tree, c_path(&staged_workspace.join(&rel))?));
            }
        }

        let mut lent_paths = Vec::with_capacity(lends.len());
        for (i, lend) in lends.iter().enumerate() {
            let (target, tree) = lend_path(&dir, i, lend, user)?;
            attach.push((tree, c_path(&target)?));
            let host = lend.host();
            if lend.writable && host.is_dir() {
                for rel in pinned_files(&host)? {
                    let tree = clone_mount(&host.join(&rel))?;
                    make_read_only(&tree).map_err(|e| {
                        denied(format!("cannot pin {} read-only", rel.display()), e)
                    })?;
                    attach.push((tree, c_path(&target.join(&rel))?));
                }
            }
            lent_paths.push(target);
        }

        let mut bridge_binary = None;
        let mut proxy_socket = None;
        if let Some(bridge) = egress {
            // The proxy socket is bl's own: the caged user must be able to
            // connect to it, which takes write permission.
            lchown(&bridge.proxy_socket, user.uid, user.gid)
                .map_err(|e| denied(bridge.proxy_socket.display(), e))?;
            for (source, name, slot) in [
                (&bridge.proxy_socket, "egress.sock", &mut proxy_socket),
                (&bridge.bridge_binary, "bl", &mut bridge_binary),
            ] {
                let target = dir.join(name);
                if !target.exists() {
                    std::fs::File::create(&target).map_err(|e| denied(target.display(), e))?;
                }
                attach.push((clone_mount(source)?, c_path(&target)?));
                *slot = Some(target);
            }
        }
        Ok(Staging {
            dir,
            user,
            workspace: staged_workspace,
            bridge_binary,
            proxy_socket,
            lent: lent_paths,
            attach,
            lent_tree,
        })
    }

    /// The steps the forked child takes before it execs bubblewrap (or,
    /// with `cage`, the command itself): the clones attached in its
    /// private mount namespace; with `cage`, the cage's file system,
    /// masks and loopback; then the caged user.
    /// Everything is allocated here, in the parent.
    pub(crate) fn child_steps(
        &self,
        cage: Option<Box<crate::root_cage::RootCage>>,
    ) -> Result<ChildSteps, CommandError> {
        Ok(ChildSteps {
            attach: self
                .attach
                .iter()
                .map(|(fd, target)| (fd.as_raw_fd(), target.clone()))
                .collect(),
            // A network namespace made ahead, when one is ready.
            net: cage.as_ref().and_then(|_| crate::spare_net::take()),
            cage,
            uid: self.user.uid,
            gid: self.user.gid,
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Gives a lent workspace back to its owner (idmapped: nothing to do).
    pub(crate) fn finish(mut self) -> Result<(), CommandError> {
        match self.lent_tree.take() {
            Some(lent) => lent.give_back(),
            None => Ok(()),
        }
    }
}

/// Clones `lend`'s mount, idmapped so that its owner's files are the caged
/// user's (nothing is chowned, no mode changes), read-only unless it is
/// writable, and says where in the staging directory it is attached. A
/// lend needs an idmapped mount: the operator's home is never chowned.
fn lend_path(
    dir: &Path,
    i: usize,
    lend: &Lend,
    user: CagedUser,
) -> Result<(PathBuf, OwnedFd), CommandError> {
    let host = lend.host();
    let fd = open_lend(lend)?;
    let meta = nix::sys::stat::fstat(&fd).map_err(|e| denied(host.display(), e))?;
    let is_dir = meta.st_mode & libc::S_IFMT == libc::S_IFDIR;
    // One mount point per slot and kind, shared by every cage of a runner
    // (each attaches its own mount there, in its own mount namespace).
    let target = dir.join(format!("lend-{}{i}", if is_dir { 'd' } else { 'f' }));
    let made = if is_dir {
        std::fs::create_dir(&target)
    } else {
        std::fs::File::create_new(&target).map(drop)
    };
    match made {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(denied(target.display(), e)),
    }
    if !user.idmap {
        return Err(denied(
            host.display(),
            format!(
                "{OWNERSHIP_VAR}=chown: bl lends the operator's files (an agent's login, its program) only through an idmapped mount, never by chown"
            ),
        ));
    }
    let tree = clone_mount_at(&fd, &host)?;
    if !lend.writable {
        make_read_only(&tree).map_err(|e| denied("cannot make a lent path read-only", e))?;
    }
    idmap(&tree, (meta.st_uid, meta.st_gid), user).map_err(|e| {
        denied(
            format!(
                "cannot lend {} to the caged user (uid {}) through an idmapped mount (Linux 5.12+ and a file system that supports them)",
                host.display(),
                user.uid
            ),
            e,
        )
    })?;
    Ok((target, tree))
}

/// The regular files under `root` that a caged command must not write
/// through an idmapped mount: more than one link, or a set-id bit.
fn pinned_files(root: &Path) -> Result<Vec<PathBuf>, CommandError> {
    let fail = |e: std::io::Error| denied(format!("cannot walk {}", root.display()), e);
    let root_fd = open_root(root).map_err(fail)?;
    let device = nix::sys::stat::fstat(&root_fd)
        .map_err(|e| fail(e.into()))?
        .st_dev;
    let mut pinned = Vec::new();
    let error = visit_below(
        root_fd,
        Path::new(""),
        device,
        1,
        &mut |_, _, path, stat| {
            if out_of_reach(stat) {
                pinned.push(path.to_path_buf());
            }
            Ok(())
        },
    );
    match error {
        None => Ok(pinned),
        Some(e) => Err(fail(e)),
    }
}

/// What the child does between fork and exec, with nothing left to allocate.
pub(crate) struct ChildSteps {
    attach: Vec<(RawFd, CString)>,
    /// The whole cage, made here rather than by bubblewrap.
    cage: Option<Box<crate::root_cage::RootCage>>,
    /// The cage's network namespace, made ahead (see spare_net); `None`:
    /// the child is started in a new one.
    net: Option<OwnedFd>,
    uid: u32,
    gid: u32,
}

impl ChildSteps {
    /// The namespaces the child is started in: a mount namespace of its
    /// own, and a pid namespace when it mounts the cage's /proc.
    pub(crate) fn clone_flags(&self) -> libc::c_int {
        if self.cage.is_some() {
            let net = if self.net.is_some() {
                0
            } else {
                libc::CLONE_NEWNET
            };
            libc::CLONE_NEWNS | libc::CLONE_NEWPID | net
        } else {
            libc::CLONE_NEWNS
        }
    }

    /// The cage bl makes itself, when it does (the child then execs the
    /// command: it starts a session and loads the filter itself).
    pub(crate) fn cage(&self) -> Option<&crate::root_cage::RootCage> {
        self.cage.as_deref()
    }

    /// Whether the child is pid 1 of its own pid namespace (where
    /// `getppid` is 0, whoever its parent is).
    pub(crate) fn new_pid_namespace(&self) -> bool {
        self.clone_flags() & libc::CLONE_NEWPID != 0
    }

    /// Runs in the child started with [`ChildSteps::clone_flags`]:
    /// async-signal-safe system calls only.
    pub(crate) fn run(&self) -> std::io::Result<()> {
        let check = |rc: libc::c_long| {
            if rc < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        // SAFETY: plain system calls on descriptors and C strings that live
        // as long as `self`.
        unsafe {
            if let Some(net) = &self.net {
                check(libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET) as libc::c_long)?;
            }
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) as libc::c_long)?;
            for (fd, target) in &self.attach {
                check(libc::syscall(
                    libc::SYS_move_mount,
                    *fd,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    target.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                ))?;
            }
            if let Some(cage) = &self.cage {
                cage.build()?;
            }
            let groups = [self.gid as libc::gid_t];
            // Raw system calls: glibc's wrappers would set the ids of
            // every thread of the process, and this child shares bl's
            // memory, thread list included, until it execs.
            check(libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr()))?;
            check(libc::syscall(
                libc::SYS_setresgid,
                self.gid,
                self.gid,
                self.gid,
            ))?;
            check(libc::syscall(
                libc::SYS_setresuid,
                self.uid,
                self.uid,
                self.uid,
            ))?;
        }
        Ok(())
    }
}

/// A workspace chowned to the caged user, with every entry's owner recorded
/// (by inode) so that it can be given back. The walk goes by directory
/// descriptor, never by path: nothing is followed through a symlink even if
/// one is swapped in while it runs, no other file system is entered, and
/// paths longer than PATH_MAX do not stop it. Two kinds of regular file are
/// left alone, so they stay unwritable to the command: one with more than
/// one link (it may also live outside the workspace), and a set-uid or
/// set-gid one (chown clears the bit; restoring it on what the command
/// wrote would mint a set-id binary).
pub(crate) struct LentTree {
    root: PathBuf,
    device: u64,
    owner: (u32, u32),
    user: CagedUser,
    owners: std::collections::HashMap<u64, (u32, u32)>,
    lent: bool,
}

/// A duplicate of `fd` that no command started meanwhile inherits.
fn dup_cloexec(fd: &OwnedFd) -> std::io::Result<OwnedFd> {
    use std::os::fd::AsFd;
    fd.as_fd().try_clone_to_owned()
}

/// How deep the walk goes; deeper directories are reported, not visited.
const MAX_DEPTH: usize = 512;

type Visit<'a> = dyn FnMut(
        std::os::fd::BorrowedFd<'_>,
        &std::ffi::CStr,
        &Path,
        &nix::sys::stat::FileStat,
    ) -> nix::Result<()>
    + 'a;

/// Calls `visit(parent, name, path, stat)` for every entry below the open
/// directory `dir` (`path` relative to where the walk began), depth first,
/// and returns the first error met (the walk goes on past errors).
fn visit_below(
    dir: std::os::fd::OwnedFd,
    prefix: &Path,
    device: u64,
    depth: usize,
    visit: &mut Visit<'_>,
) -> Option<std::io::Error> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::{Mode, SFlag, fstatat};
    let mut first_error: Option<std::io::Error> = None;
    fn keep(first: &mut Option<std::io::Error>, e: impl Into<std::io::Error>) {
        first.get_or_insert(e.into());
    }
    let mut dir = match nix::dir::Dir::from_fd(dir) {
        Ok(d) => d,
        Err(e) => return Some(e.into()),
    };
    let mut names: Vec<CString> = Vec::new();
    for entry in dir.iter() {
        match entry {
            Ok(entry) if ![&b"."[..], b".."].contains(&entry.file_name().to_bytes()) => {
                names.push(entry.file_name().to_owned())
            }
            Ok(_) => {}
            Err(e) => keep(&mut first_error, e),
        }
    }
    let parent = std::os::fd::AsFd::as_fd(&dir);
    for name in names {
        let stat = match fstatat(
            parent,
            name.as_c_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(stat) => stat,
            Err(e) => {
                keep(&mut first_error, e);
                continue;
            }
        };
        if stat.st_dev != device {
            continue;
        }
        let path = prefix.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        if let Err(e) = visit(parent, &name, &path, &stat) {
            keep(&mut first_error, e);
        }
        if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFDIR {
            continue;
        }
        if depth >= MAX_DEPTH {
            first_error.get_or_insert(std::io::Error::other(format!(
                "directories nest deeper than {MAX_DEPTH} levels"
            )));
            continue;
        }
        let child = openat(
            parent,
            name.as_c_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        );
        match child {
            Ok(child) => {
                if let Some(e) = visit_below(child, &path, device, depth + 1, visit) {
                    first_error.get_or_insert(e);
                }
            }
            Err(e) => keep(&mut first_error, e),
        }
    }
    first_error
}

fn chown_at(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    (uid, gid): (u32, u32),
) -> nix::Result<()> {
    nix::unistd::fchownat(
        parent,
        name,
        Some(uid.into()),
        Some(gid.into()),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
}

fn lchown(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    nix::unistd::fchownat(
        nix::fcntl::AT_FDCWD,
        path,
        Some(uid.into()),
        Some(gid.into()),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(std::io::Error::from)
}

fn open_root(root: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{OFlag, open};
    open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(std::io::Error::from)
}

impl LentTree {
    pub(crate) fn lend(root: &Path, user: CagedUser) -> Result<LentTree, CommandError> {
        let fail = |e: std::io::Error| {
            denied(
                format!("cannot lend {} to the caged user", root.display()),
                e,
            )
        };
        let root_fd = open_root(root).map_err(fail)?;
        let stat = nix::sys::stat::fstat(&root_fd).map_err(|e| fail(e.into()))?;
        let mut lent = LentTree {
            root: root.to_path_buf(),
            device: stat.st_dev,
            owner: (stat.st_uid, stat.st_gid),
            user,
            owners: std::collections::HashMap::new(),
            lent: true,
        };
        lent.owners.insert(stat.st_ino, (stat.st_uid, stat.st_gid));
        let mut result =
            nix::unistd::fchown(&root_fd, Some(user.uid.into()), Some(user.gid.into()))
                .map_err(std::io::Error::from)
                .err();
        let owners = &mut lent.owners;
        let error = visit_below(
            dup_cloexec(&root_fd).map_err(fail)?,
            Path::new(""),
            stat.st_dev,
            1,
            &mut |parent, name, _, stat| {
                if out_of_reach(stat) {
                    return Ok(());
                }
                owners.insert(stat.st_ino, (stat.st_uid, stat.st_gid));
                chown_at(parent, name, (user.uid, user.gid))
            },
        );
        result = result.or(error);
        match result {
            None => Ok(lent),
            Some(e) => {
                let _ = lent.give_back_inner();
                Err(fail(e))
            }
        }
    }

    fn give_back_inner(&mut self) -> Result<(), std::io::Error> {
        self.lent = false;
        let root_fd = open_root(&self.root)?;
        let (owners, owner, user) = (&self.owners, self.owner, self.user);
        let wanted = |stat: &nix::sys::stat::FileStat| match owners.get(&stat.st_ino) {
            Some(recorded) => Some(*recorded),
            // Written by the command: it belongs to the workspace's owner.
            None if stat.st_uid == user.uid => Some(owner),
            None => None,
        };
        let root_stat = nix::sys::stat::fstat(&root_fd)?;
        let mut first_error = None;
        if let Some(want) = wanted(&root_stat)
            && (root_stat.st_uid, root_stat.st_gid) != want
            && let Err(e) = nix::unistd::fchown(&root_fd, Some(want.0.into()), Some(want.1.into()))
        {
            first_error = Some(std::io::Error::from(e));
        }
        let error = visit_below(
            dup_cloexec(&root_fd)?,
            Path::new(""),
            self.device,
            1,
            &mut |parent, name, _, stat| match wanted(stat) {
                Some(want) if (stat.st_uid, stat.st_gid) != want => chown_at(parent, name, want),
                _ => Ok(()),
            },
        );
        match first_error.or(error) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub(crate) fn give_back(mut self) -> Result<(), CommandError> {
        let root = self.root.clone();
        self.give_back_inner().map_err(|e| {
            CommandError::Spawn(format!(
                "could not give all of {} back to its owner: {e}",
                root.display()
            ))
        })
    }
}

impl Drop for LentTree {
    fn drop(&mut self) {
        if self.lent {
            let _ = self.give_back_inner();
        }
    }
}

#[cfg(test)]
mod tests {

    /// A bl that exits before it releases the child (its write end of the
    /// pipe closed, as at exit) leaves no child waiting for ever.
    #[test]
    fn the_namespace_child_ends_when_bl_lets_go_without_a_word() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED: making a user namespace here needs root");
            return;
        }
        let child = NamespaceChild::start().unwrap();
        let pid = nix::unistd::Pid::from_raw(child.pid);
        let NamespaceChild { release, stack, .. } = child;
        drop(release);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
                Ok(nix::sys::wait::WaitStatus::StillAlive) => {}
                Ok(_) => break,
                Err(e) => panic!("{e}"),
            }
            if std::time::Instant::now() > deadline {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(pid, None);
                panic!("the child still waits after bl let go of the pipe");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        drop(stack);
    }
    use super::*;

    #[test]
    fn the_caged_user_comes_from_the_environment_and_is_never_root() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(CagedUser::from_env(env(&[])).unwrap(), CagedUser::NOBODY);
        let user = CagedUser::from_env(env(&[
            (UID_VAR, "4242"),
            (GID_VAR, "4343"),
            (OWNERSHIP_VAR, "chown"),
        ]))
        .unwrap();
        assert_eq!((user.uid, user.gid, user.idmap), (4242, 4343, false));
        let err = CagedUser::from_env(env(&[(UID_VAR, "0")])).unwrap_err();
        assert!(err.to_string().contains("never runs as host root"), "{err}");
        assert!(CagedUser::from_env(env(&[(GID_VAR, "0")])).is_err());
        assert!(CagedUser::from_env(env(&[(UID_VAR, "nobody")])).is_err());
        assert!(CagedUser::from_env(env(&[(OWNERSHIP_VAR, "maybe")])).is_err());
        // The disk group (6 on Debian) would hand the cage the host's disks.
        if let Some(disk) = std::fs::read_to_string("/etc/group")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("disk:x:"))
            .and_then(|rest| rest.split(':').next())
        {
            let disk = disk.to_string();
            let err =
                CagedUser::from_env(move |k| (k == GID_VAR).then(|| disk.clone())).unwrap_err();
            assert!(err.to_string().contains("`disk`"), "{err}");
        }
    }
}
