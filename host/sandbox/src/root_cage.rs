//! The process tier's cage when bl runs as root, made by bl itself.
//!
//! Run by an unprivileged user, a cage needs bubblewrap: only a user
//! namespace gives such a user the right to mount. Run by root, bl already
//! holds that right, and the child it starts for a command (see
//! [`crate::spawn`]) can make the cage directly, as bubblewrap would make
//! it for `bwrap --dev-bind / / --tmpfs … --bind … --unshare-net
//! --unshare-pid --proc /proc … --new-session --die-with-parent --cap-drop
//! ALL --seccomp`, without starting bubblewrap, a user namespace and a
//! second process, and without reading the mount table once for every
//! mount:
//!
//! - the child starts in new mount, pid and network namespaces: the
//!   command is pid 1 of its own pid namespace, so when it ends everything
//!   it started ends, and its network is a loopback device alone, brought
//!   up here;
//! - it covers, shows and hides the same paths, in the same order, as the
//!   bubblewrap argv of the process tier ([`plan`]); the only paths it
//!   creates (mount points, the private HOME and TMPDIR, a program's link)
//!   lie inside the tmpfs mounts it made itself, never on the host's disks;
//! - /proc and /sys are masked as for every cage ([`Masks`]),
//!   and every mount is made nosuid;
//! - it drops to the caged user with an empty capability bounding set,
//!   starts a new session, sets no-new-privileges and loads the seccomp
//!   filter last, just before it execs the command.
//!
//! Nothing here runs in the child but system calls on what [`RootCage`]
//! prepared in the parent.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use bl_core::CommandError;
use nix::libc;

use crate::bubblewrap::Shown;
use crate::caged_user::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, seal_tree};

/// One step of the cage's file system, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// An empty tmpfs owned by the caged user (mode 0755).
    Tmpfs(CString),
    /// A directory made inside one of those tmpfs mounts (an existing one
    /// is used as it is); the caged user owns a new one.
    Dir(CString),
    /// An empty file made the same way, as a file's mount point.
    File(CString),
    /// A bind mount of `from` (with what is mounted below it) on `to`.
    Bind {
        from: CString,
        to: CString,
        read_only: bool,
    },
    /// A symlink made inside a tmpfs mount.
    Symlink { target: CString, link: CString },
}

/// What the process tier's cage shows, as [`plan`] turns it into steps.
pub(crate) struct CageView<'a> {
    /// The workspace: where the command sees it, and the staged clone
    /// bound there.
    pub workspace: &'a Path,
    pub workspace_source: &'a Path,
    pub writable: bool,
    /// The private HOME and TMPDIR's parent.
    pub private_root: &'a Path,
    pub covered: &'a [PathBuf],
    pub shown: &'a [Shown],
    pub hidden: &'a [PathBuf],
    pub links: &'a [(PathBuf, PathBuf)],
}

/// `path` as a C string, when it is absolute and made of plain names
/// only: what [`plan`] reasons about as text is then what the kernel
/// walks (no `..` climbs out of a directory the cage made).
fn c_path(path: &Path) -> Result<CString, CommandError> {
    use std::path::Component;
    let plain = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain {
        return Err(CommandError::Denied(format!(
            "{}: a cage's paths must be absolute and plain (no `..`)",
            path.display()
        )));
    }
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| CommandError::Denied(format!("{} holds a NUL byte", path.display())))
}

/// The steps that make `view`, in bubblewrap's order for the process tier
/// (private HOME, covers, what is shown again, hidden directories, the
/// workspace), with a program's link last: no directory is ever made
/// through a symlink. A mount point is made only inside a tmpfs of the
/// cage's own and outside every path shown again; anywhere else it must
/// already exist, or the cage is refused.
fn plan(view: &CageView) -> Result<Vec<Step>, CommandError> {
    let private = view.private_root;
    let mut fresh: Vec<&Path> = vec![private];
    fresh.extend(view.covered.iter().map(PathBuf::as_path));
    // /sys bound onto itself, so that it is a mount of its own whatever
    // the host has there, which the masks then seal read-only by itself.
    let mut steps = vec![Step::Bind {
        from: c"/sys".into(),
        to: c"/sys".into(),
        read_only: true,
    }];
    for path in [view.workspace, view.workspace_source] {
        c_path(path)?;
    }
    // The staged workspace is bound from where it was made: a cover over
    // it (a directory the caged user cannot search, such as a /tmp made
    // private with mode 0700) would hide it, and the command would fail
    // to start with a misleading "No such file or directory".
    if let Some(over) = view
        .covered
        .iter()
        .chain(view.hidden)
        .find(|c| view.workspace_source.starts_with(c))
    {
        return Err(CommandError::Denied(format!(
            "the cage's staging directory {} lies under {}, which the cage must hide (the caged user cannot search it, or it is hidden by policy); make {} searchable by others (for /tmp: chmod 1777 /tmp) or set TMPDIR to a directory that is",
            view.workspace_source.display(),
            over.display(),
            over.display()
        )));
    }
    steps.extend([
        Step::Tmpfs(c_path(private)?),
        Step::Dir(c_path(&private.join("home"))?),
        Step::Dir(c_path(&private.join("tmp"))?),
    ]);
    for dir in view.covered {
        steps.push(Step::Tmpfs(c_path(dir)?));
    }
    let mut shown_so_far: Vec<&Path> = Vec::new();
    for shown in view.shown {
        let is_dir = shown.source.is_dir();
        mount_point(&mut steps, &shown.inside, is_dir, &fresh, &shown_so_far)?;
        steps.push(Step::Bind {
            from: c_path(&shown.source)?,
            to: c_path(&shown.inside)?,
            read_only: !shown.writable,
        });
        shown_so_far.push(&shown.inside);
    }
    for dir in view.hidden {
        if !view.covered.iter().any(|c| dir.starts_with(c)) && dir.is_dir() {
            steps.push(Step::Tmpfs(c_path(dir)?));
            fresh.push(dir);
        }
    }
    mount_point(&mut steps, view.workspace, true, &fresh, &shown_so_far)?;
    steps.push(Step::Bind {
        from: c_path(view.workspace_source)?,
        to: c_path(view.workspace)?,
        read_only: !view.writable,
    });
    shown_so_far.push(view.workspace);
    for (target, link) in view.links {
        let parent = link.parent().unwrap_or(Path::new("/"));
        if !fresh.iter().any(|f| link.starts_with(f) && link != *f)
            || shown_so_far.iter().any(|s| link.starts_with(s))
        {
            return Err(CommandError::Denied(format!(
                "cannot link {} inside the cage: it lies outside the cage's own directories",
                link.display()
            )));
        }
        mount_point(&mut steps, parent, true, &fresh, &shown_so_far)?;
        steps.push(Step::Symlink {
            target: c_path(target)?,
            link: c_path(link)?,
        });
    }
    Ok(steps)
}

/// Adds the steps that make `target` (a directory, or a file when not
/// `is_dir`) and its missing parents, where they lie inside one of the
/// cage's own tmpfs mounts (`fresh`) and outside everything shown so far;
/// elsewhere `target` must exist on the host.
fn mount_point(
    steps: &mut Vec<Step>,
    target: &Path,
    is_dir: bool,
    fresh: &[&Path],
    shown: &[&Path],
) -> Result<(), CommandError> {
    let inside_shown = shown.iter().any(|s| target.starts_with(s));
    let root = fresh
        .iter()
        .filter(|f| target.starts_with(f))
        .max_by_key(|f| f.components().count());
    match root {
        Some(root) if !inside_shown => {
            let below: Vec<_> = target
                .strip_prefix(root)
                .unwrap_or(Path::new(""))
                .components()
                .collect();
            let mut path = root.to_path_buf();
            for (i, name) in below.iter().enumerate() {
                path.push(name);
                let last = i + 1 == below.len();
                steps.push(if last && !is_dir {
                    Step::File(c_path(&path)?)
                } else {
                    Step::Dir(c_path(&path)?)
                });
            }
            Ok(())
        }
        _ if std::fs::symlink_metadata(target).is_ok() => Ok(()),
        _ => Err(CommandError::Denied(format!(
            "cannot show {} inside the cage: nothing is there to mount on, and bl makes \
             mount points only inside the cage's own directories",
            target.display()
        ))),
    }
}

/// The /proc and /sys masks of the process tier's cage when bl makes it
/// in the child's own mount and pid
/// namespaces, with no mount table read per mask:
///
/// - the child is pid 1 of its new pid namespace, so the /proc it mounts
///   shows that namespace only; /proc/sys and the rest of
///   [`READ_ONLY_PROC`] are bound read-only onto themselves;
/// - /sys and every mount below it are made read-only, nosuid and nodev
///   in one recursive `mount_setattr` (the cage bound /sys onto itself
///   first, so that it is a mount of its own);
/// - each [`HIDDEN`] path is covered: an empty read-only tmpfs over a
///   directory, /dev/null over a file.
///
/// [`READ_ONLY_PROC`]: crate::bubblewrap::READ_ONLY_PROC
/// [`HIDDEN`]: crate::bubblewrap::HIDDEN
struct Masks {
    read_only: Vec<CString>,
    dirs: Vec<CString>,
    files: Vec<CString>,
}

impl Masks {
    fn new() -> Result<Masks, CommandError> {
        let mut masks = Masks {
            read_only: Vec::new(),
            dirs: Vec::new(),
            files: Vec::new(),
        };
        for path in crate::bubblewrap::READ_ONLY_PROC
            .iter()
            .filter(|p| Path::new(p).exists())
        {
            masks.read_only.push(c_path(Path::new(path))?);
        }
        for path in crate::bubblewrap::HIDDEN {
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.is_dir() => masks.dirs.push(c_path(Path::new(path))?),
                Ok(_) => masks.files.push(c_path(Path::new(path))?),
                Err(_) => {}
            }
        }
        Ok(masks)
    }

    /// Runs in the forked child, root and pid 1 in its new namespaces:
    /// system calls on memory allocated before the fork only.
    fn run(&self) -> std::io::Result<()> {
        let check = |rc: libc::c_int| {
            if rc < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        let sealed = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        let bind =
            |from: &std::ffi::CStr, to: &std::ffi::CStr, read_only: bool| -> std::io::Result<()> {
                // SAFETY: mount(2) on C strings that outlive the call.
                unsafe {
                    check(libc::mount(
                        from.as_ptr(),
                        to.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ))?;
                    if read_only {
                        check(libc::mount(
                            std::ptr::null(),
                            to.as_ptr(),
                            std::ptr::null(),
                            libc::MS_REMOUNT | libc::MS_BIND | sealed,
                            std::ptr::null(),
                        ))?;
                    }
                }
                Ok(())
            };
        // SAFETY: mount(2) on static C strings.
        check(unsafe {
            libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        })?;
        for path in &self.read_only {
            bind(path, path, true)?;
        }
        for dir in &self.dirs {
            // SAFETY: mount(2) on C strings that live as long as `self`.
            check(unsafe {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    dir.as_ptr(),
                    c"tmpfs".as_ptr(),
                    sealed,
                    c"mode=0555,size=0".as_ptr().cast(),
                )
            })?;
        }
        for file in &self.files {
            bind(c"/dev/null", file, true)?;
        }
        seal_tree(
            c"/sys",
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )?;
        Ok(())
    }
}

/// Everything the child needs to make the cage, allocated in the parent.
pub(crate) struct RootCage {
    steps: Vec<Step>,
    masks: Masks,
    /// `mode=0755,uid=U,gid=G`: the caged user owns the cage's tmpfs mounts.
    tmpfs_options: CString,
    uid: u32,
    gid: u32,
    filter: Vec<libc::sock_filter>,
    fprog: libc::sock_fprog,
}

// SAFETY: `fprog` points into `filter`, which moves with it and is never
// changed; nothing else is shared.
unsafe impl Send for RootCage {}
// SAFETY: as above; the child only reads.
unsafe impl Sync for RootCage {}

impl RootCage {
    /// The cage for `view`, run as `uid`/`gid`, under the seccomp
    /// `program` (raw cBPF, as [`crate::seccomp::program`] makes it).
    pub(crate) fn new(
        view: &CageView,
        uid: u32,
        gid: u32,
        program: &[u8],
    ) -> Result<Box<RootCage>, CommandError> {
        let filter: Vec<libc::sock_filter> = program
            .chunks_exact(8)
            .map(|i| libc::sock_filter {
                code: u16::from_ne_bytes([i[0], i[1]]),
                jt: i[2],
                jf: i[3],
                k: u32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
            })
            .collect();
        let len = u16::try_from(filter.len())
            .map_err(|_| CommandError::Denied("the seccomp filter is too long".into()))?;
        let mut cage = Box::new(RootCage {
            steps: plan(view)?,
            masks: Masks::new()?,
            tmpfs_options: CString::new(format!("mode=0755,uid={uid},gid={gid}"))
                .expect("digits only"),
            uid,
            gid,
            filter,
            fprog: libc::sock_fprog {
                len,
                filter: std::ptr::null_mut(),
            },
        });
        cage.fprog.filter = cage.filter.as_mut_ptr();
        Ok(cage)
    }

    /// The filter for `PR_SET_SECCOMP`, loaded by the child last.
    pub(crate) fn seccomp(&self) -> *const libc::sock_fprog {
        &self.fprog
    }

    /// Makes the file system (after the clones were attached) and its
    /// masks, seals every mount nosuid, brings up the loopback device and
    /// empties the capability bounding set: all that root must do before
    /// the child drops to the caged user. Runs in the child, root in its
    /// new namespaces.
    pub(crate) fn build(&self) -> std::io::Result<()> {
        for step in &self.steps {
            self.make(step)?;
        }
        self.masks.run()?;
        seal_tree(c"/", MOUNT_ATTR_NOSUID)?;
        loopback_up()?;
        drop_bounding_set()
    }

    fn make(&self, step: &Step) -> std::io::Result<()> {
        let check = |rc: libc::c_int| {
            if rc < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        let exists = || std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST);
        let own = |parent: libc::c_int, name: &CStr| {
            // SAFETY: a descriptor and a C string that outlive the call.
            check(unsafe {
                libc::fchownat(
                    parent,
                    name.as_ptr(),
                    self.uid,
                    self.gid,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })
        };
        // SAFETY: system calls on C strings owned by `self`.
        unsafe {
            match step {
                Step::Tmpfs(dir) => check(libc::mount(
                    c"tmpfs".as_ptr(),
                    dir.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    self.tmpfs_options.as_ptr().cast(),
                )),
                Step::Dir(dir) => {
                    let (parent, name) = open_parent_in_tmpfs(dir)?;
                    let made = libc::mkdirat(parent.0, name.as_ptr(), 0o755);
                    if made == 0 {
                        own(parent.0, name)
                    } else if exists() {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                }
                Step::File(file) => {
                    let (parent, name) = open_parent_in_tmpfs(file)?;
                    let fd = libc::openat(
                        parent.0,
                        name.as_ptr(),
                        libc::O_WRONLY
                            | libc::O_CREAT
                            | libc::O_EXCL
                            | libc::O_NOFOLLOW
                            | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                        own(parent.0, name)
                    } else if exists() {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                }
                Step::Bind {
                    from,
                    to,
                    read_only,
                } => {
                    check(libc::mount(
                        from.as_ptr(),
                        to.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ))?;
                    // nodev, as bubblewrap's binds: a device node in a
                    // workspace (or owned, through the idmapping, by the
                    // caged user) opens nothing.
                    let mut attr = MOUNT_ATTR_NODEV;
                    if *read_only {
                        attr |= MOUNT_ATTR_RDONLY;
                    }
                    seal_tree(to, attr)
                }
                Step::Symlink { target, link } => {
                    let (parent, name) = open_parent_in_tmpfs(link)?;
                    check(libc::symlinkat(target.as_ptr(), parent.0, name.as_ptr()))?;
                    own(parent.0, name)
                }
            }
        }
    }
}

/// A descriptor closed when dropped (the child allocates nothing for it).
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: a descriptor this child opened and owns.
        unsafe { libc::close(self.0) };
    }
}

/// `struct open_how` of openat2(2).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Opens the directory holding `path` without following any symlink on
/// the way, and only if it lies on a tmpfs (one the cage made: the host's
/// disks are never written), with `path`'s last name. Allocates nothing.
fn open_parent_in_tmpfs(path: &CStr) -> std::io::Result<(Fd, &CStr)> {
    let invalid = || std::io::Error::from_raw_os_error(libc::EINVAL);
    let with_nul = path.to_bytes_with_nul();
    let slash = with_nul
        .iter()
        .rposition(|b| *b == b'/')
        .ok_or_else(invalid)?;
    let name = CStr::from_bytes_with_nul(&with_nul[slash + 1..]).map_err(|_| invalid())?;
    let mut parent = [0u8; 4096];
    let len = slash.max(1);
    if len >= parent.len() {
        return Err(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    parent[..len].copy_from_slice(&with_nul[..len]);
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a NUL-terminated path on this stack and an open_how of the
    // size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            parent.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = Fd(fd as libc::c_int);
    // SAFETY: a zeroed statfs is a valid out-parameter.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on the descriptor just opened.
    if unsafe { libc::fstatfs(fd.0, &mut fs) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if fs.f_type as i64 != TMPFS_MAGIC {
        return Err(std::io::Error::from_raw_os_error(libc::EXDEV));
    }
    Ok((fd, name))
}

/// Brings up `lo` in the child's new network namespace, as bubblewrap
/// does: the egress bridge listens on 127.0.0.1 there.
pub(crate) fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a socket used for two ioctls on a zeroed ifreq, then closed.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut request: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        let mut rc = libc::ioctl(sock, libc::SIOCGIFFLAGS as libc::Ioctl, &mut request);
        if rc == 0 {
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            rc = libc::ioctl(sock, libc::SIOCSIFFLAGS as libc::Ioctl, &request);
        }
        let error = std::io::Error::last_os_error();
        libc::close(sock);
        if rc < 0 { Err(error) } else { Ok(()) }
    }
}

/// Drops every capability from the bounding set (before the drop to the
/// caged user: it takes CAP_SETPCAP), so nothing exec'd can regain one.
fn drop_bounding_set() -> std::io::Result<()> {
    for cap in 0..=63 {
        // SAFETY: prctl with plain integers.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } < 0 {
            let error = std::io::Error::last_os_error();
            // Past the last capability this kernel knows.
            if error.raw_os_error() == Some(libc::EINVAL) {
                return Ok(());
            }
            return Err(error);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    #[test]
    fn mount_points_are_made_only_inside_the_cages_own_tmpfs_and_links_come_last() {
        let host = tempfile::tempdir().unwrap();
        let home = host.path().join("home");
        let lent = home.join(".claude");
        std::fs::create_dir_all(&lent).unwrap();
        let workspace = home.join("proj/ws");
        let private = host.path().join("private");
        let shown = vec![Shown {
            source: lent.clone(),
            inside: lent.clone(),
            writable: true,
        }];
        let links = vec![(lent.join("bin/claude"), home.join(".local/bin/claude"))];
        let covered = vec![home.clone()];
        let view = CageView {
            workspace: &workspace,
            workspace_source: Path::new("/staging/workspace"),
            writable: true,
            private_root: &private,
            covered: &covered,
            shown: &shown,
            hidden: &[],
            links: &links,
        };
        let p = |path: &Path| c(path.to_str().unwrap());
        assert_eq!(
            plan(&view).unwrap(),
            vec![
                Step::Bind {
                    from: c("/sys"),
                    to: c("/sys"),
                    read_only: true
                },
                Step::Tmpfs(p(&private)),
                Step::Dir(p(&private.join("home"))),
                Step::Dir(p(&private.join("tmp"))),
                Step::Tmpfs(p(&home)),
                Step::Dir(p(&lent)),
                Step::Bind {
                    from: p(&lent),
                    to: p(&lent),
                    read_only: false
                },
                Step::Dir(p(&home.join("proj"))),
                Step::Dir(p(&workspace)),
                Step::Bind {
                    from: c("/staging/workspace"),
                    to: p(&workspace),
                    read_only: false
                },
                Step::Dir(p(&home.join(".local"))),
                Step::Dir(p(&home.join(".local/bin"))),
                Step::Symlink {
                    target: p(&lent.join("bin/claude")),
                    link: p(&home.join(".local/bin/claude")),
                },
            ]
        );
    }

    #[test]
    fn a_staging_directory_the_cage_would_hide_is_refused_by_name() {
        let covered = vec![PathBuf::from("/tmp")];
        let view = CageView {
            workspace: Path::new("/tmp/case/ws"),
            workspace_source: Path::new("/tmp/bl-cage-x/workspace"),
            writable: true,
            private_root: Path::new("/run/private"),
            covered: &covered,
            shown: &[],
            hidden: &[],
            links: &[],
        };
        let err = plan(&view).unwrap_err();
        assert!(
            matches!(&err, CommandError::Denied(m) if m.contains("lies under /tmp") && m.contains("chmod 1777 /tmp")),
            "{err:?}"
        );
    }

    #[test]
    fn a_path_that_climbs_with_dots_is_refused() {
        let view = |link: &str| {
            let links = vec![(PathBuf::from("/opt/tool"), PathBuf::from(link))];
            let covered = vec![PathBuf::from("/home/u")];
            let view = CageView {
                workspace: Path::new("/home/u/ws"),
                workspace_source: Path::new("/staging/workspace"),
                writable: true,
                private_root: Path::new("/tmp/private"),
                covered: &covered,
                shown: &[],
                hidden: &[],
                links: &links,
            };
            plan(&view).map(|_| ())
        };
        assert!(view("/home/u/.local/bin/tool").is_ok());
        for climbing in [
            "/home/u/.config/../../.x/tool",
            "/home/u/bin/../../../etc/tool",
        ] {
            let err = view(climbing).unwrap_err();
            assert!(
                matches!(&err, CommandError::Denied(m) if m.contains("absolute and plain")),
                "{climbing}: {err:?}"
            );
        }
    }

    #[test]
    fn nothing_is_made_on_the_host_or_inside_what_is_shown_again() {
        let host = tempfile::tempdir().unwrap();
        let covered_home = host.path().join("home");
        let lent = covered_home.join(".claude");
        let private = host.path().join("private");
        // A pin inside a shown directory that is not there: refused, never made.
        let shown = [
            Shown {
                source: lent.clone(),
                inside: lent.clone(),
                writable: true,
            },
            Shown {
                source: lent.join("gone.json"),
                inside: lent.join("gone.json"),
                writable: false,
            },
        ];
        let covered = vec![covered_home.clone()];
        let outside = host.path().join("elsewhere/ws");
        for (workspace, shown) in [
            (&outside, &shown[..1]),
            (&covered_home.join("ws"), &shown[..]),
        ] {
            let view = CageView {
                workspace,
                workspace_source: Path::new("/staging/workspace"),
                writable: false,
                private_root: &private,
                covered: &covered,
                shown,
                hidden: &[],
                links: &[],
            };
            let err = plan(&view).unwrap_err();
            assert!(
                matches!(&err, CommandError::Denied(m) if m.contains("nothing is there to mount on")),
                "{err:?}"
            );
        }
    }
}
