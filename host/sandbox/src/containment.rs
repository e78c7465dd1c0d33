//! No process a command starts outlives it: not when the command ends, not
//! when it times out, not when bl is stopped or killed.
//!
//! - bl is a child subreaper ([`become_subreaper`]): a descendant that
//!   daemonises (setsid, fork, fork) is re-parented to bl, not to init, so
//!   it is still bl's to find, kill and reap.
//! - Where the machine has a writable cgroup v2 hierarchy, bl makes one
//!   cgroup for itself (`bl-<pid>-<start>` beside its own) and one leaf in
//!   it per command; the command joins its leaf before it execs, and when
//!   it ends the leaf is killed (`cgroup.kill`) and removed. A process
//!   cannot leave a cgroup it was not given write access to, so this holds
//!   for hostile commands too.
//! - Elsewhere (the *subreaper walk*), the command's process group is
//!   killed, and so is every process re-parented to bl that carries the
//!   command's marker in its environment, with everything below it.
//! - Every direct child dies with bl (`PR_SET_PDEATHSIG`), and a watchdog
//!   process kills every cgroup and process group bl still had when bl
//!   itself dies (even by SIGKILL): it waits on a pipe only bl holds.
//! - Each command's process identity (pid, start time, boot id, cgroup)
//!   can be appended to a spawn log ([`record_spawns`]); a later controller
//!   kills whatever of it is still alive ([`kill_survivors`]).
//! - The private directories bl makes in the temporary directory (and, for
//!   a cage's mount points, on `/dev/shm`) carry its identity too
//!   ([`owned_tempdir`], [`owned_mount_point_dir`]); the next bl removes
//!   those a killed one left.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::libc;

/// `auto` (a cgroup where the machine allows it, else the walk),
/// `cgroup` or `subreaper` (forces the walk).
pub const CONTAINMENT_VAR: &str = "BL_SANDBOX_CONTAINMENT";

/// The variable that marks a command's processes for the subreaper walk.
pub const MARKER_VAR: &str = "BL_CONTAINED";

/// How long killed processes get to be gone before a leaf is left behind.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// Makes bl a child subreaper: orphaned descendants are re-parented to it.
/// Returns whether the kernel agreed (Linux only).
pub fn become_subreaper() -> bool {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// How this process contains its commands: decided on first use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// A cgroup v2 leaf per command, under bl's own cgroup (this path).
    Cgroup(PathBuf),
    /// The subreaper walk: process groups and marked orphans.
    Walk,
}

impl Mode {
    pub fn describe(&self) -> String {
        match self {
            Mode::Cgroup(dir) => format!("a cgroup v2 per command, under {}", dir.display()),
            Mode::Walk => "the subreaper walk (no writable cgroup v2 here)".into(),
        }
    }
}

struct State {
    /// Decided when the first command is contained (a probe of the cgroup
    /// tree costs a process), so a bl that starts none makes no cgroup.
    mode: OnceLock<Mode>,
    /// This process's identity: `<pid>.<start ticks>`.
    me: String,
    boot_id: String,
    next: AtomicU64,
    /// Commands alive now, by id: their process groups.
    live: Mutex<HashMap<u64, i32>>,
    /// Direct children started by [`Contained`] (never an orphan).
    children: Mutex<HashSet<i32>>,
    watchdog: Mutex<Option<Watchdog>>,
    /// Where commands' identities are appended: the logs of the runs
    /// recording now, each kept open once written to.
    spawn_logs: Mutex<Vec<SpawnLog>>,
    /// Empty leaves a command ended in, to be used again: making and
    /// removing a cgroup costs more than the rest of a short command's
    /// containment.
    spare_leaves: Mutex<Vec<PathBuf>>,
}

static STATE: OnceLock<State> = OnceLock::new();

/// Whether every child of this process that was not started through
/// [`Contained`] is an orphan a command left (see [`claim_orphans`]).
static CLAIMS_ORPHANS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says that this process starts children only through [`Contained`]
/// (and its watchdog): any other child it has was adopted, as a subreaper,
/// from a command that left it behind, and is ended and reaped. A library
/// user that forks children of its own must not call this.
pub fn claim_orphans() {
    CLAIMS_ORPHANS.store(true, Ordering::SeqCst);
}

fn claims_orphans() -> bool {
    CLAIMS_ORPHANS.load(Ordering::SeqCst)
}

fn state() -> &'static State {
    STATE.get_or_init(|| {
        let me = format!("{}.{}", std::process::id(), own_start().unwrap_or(0));
        State {
            mode: OnceLock::new(),
            me,
            boot_id: boot_id(),
            next: AtomicU64::new(1),
            live: Mutex::new(HashMap::new()),
            children: Mutex::new(HashSet::new()),
            watchdog: Mutex::new(None),
            spawn_logs: Mutex::new(Vec::new()),
            spare_leaves: Mutex::new(Vec::new()),
        }
    })
}

impl State {
    fn mode(&self) -> &Mode {
        self.mode.get_or_init(|| {
            let forced = std::env::var(CONTAINMENT_VAR).unwrap_or_default();
            if forced.trim() == "subreaper" {
                return Mode::Walk;
            }
            match cgroup_home(&self.me) {
                Some((dir, probed)) => {
                    // The leaf the probe joined and left is the first spare.
                    lock(&self.spare_leaves).push(probed);
                    Mode::Cgroup(dir)
                }
                None => Mode::Walk,
            }
        })
    }
}

/// How commands are contained in this process.
pub fn mode() -> Mode {
    state().mode().clone()
}

struct SpawnLog {
    recording: u64,
    path: PathBuf,
    file: Option<std::fs::File>,
}

/// Appends each contained command's process identity (one JSON line each)
/// to `path` until the returned guard is dropped. Every log recording when
/// a command starts gets its line: a process that drives several runs at
/// once (a nested run, or runs an embedding app started side by side)
/// writes each command to all of theirs. A log that also names another
/// run's commands costs nothing: [`kill_survivors`] ends only what a
/// controller that is gone left.
pub fn record_spawns(path: PathBuf) -> SpawnRecording {
    let state = state();
    let recording = state.next.fetch_add(1, Ordering::SeqCst);
    lock(&state.spawn_logs).push(SpawnLog {
        recording,
        path,
        file: None,
    });
    SpawnRecording(recording)
}

/// A spawn log being written to; see [`record_spawns`].
#[must_use = "the log is written to only while this lives"]
pub struct SpawnRecording(u64);

impl Drop for SpawnRecording {
    fn drop(&mut self) {
        lock(&state().spawn_logs).retain(|log| log.recording != self.0);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kernel's boot id: a process identity means nothing across boots.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// `R`, `S`, `Z` (a zombie: ended, not yet reaped), …
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    /// Start time, in clock ticks after boot.
    pub start: u64,
}

/// Reads `/proc/<pid>/stat` (`None`: no such process).
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = read_kernel_file(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the
    // last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgid: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Now, in the unit `/proc/<pid>/stat` gives a process's start in: clock
/// ticks of `CLOCK_BOOTTIME` (the kernel divides the nanoseconds down).
fn boot_ticks() -> Option<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills the timespec owned here; sysconf with a valid name
    // has no preconditions.
    let (got, per_second) = unsafe {
        (
            libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now),
            libc::sysconf(libc::_SC_CLK_TCK),
        )
    };
    let per_second = u64::try_from(per_second).ok().filter(|_| got == 0)?;
    let nanos =
        u64::try_from(now.tv_sec).ok()? * 1_000_000_000 + u64::try_from(now.tv_nsec).ok()?;
    Some(nanos / (1_000_000_000 / per_second.max(1)))
}

fn own_start() -> Option<u64> {
    proc_stat(std::process::id() as i32).map(|s| s.start)
}

/// The cgroup v2 directory this process is in, when one is mounted.
fn own_cgroup_dir() -> Option<PathBuf> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (root, mount) = mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        if fs.split(' ').next()? != "cgroup2" {
            return None;
        }
        let fields: Vec<&str> = mount.split(' ').collect();
        Some((fields.get(3)?.to_string(), fields.get(4)?.to_string()))
    })?;
    let relative = own.strip_prefix(root.trim_end_matches('/')).unwrap_or(own);
    Some(Path::new(&mount).join(relative.trim_start_matches('/')))
}

/// Makes bl's own cgroup (`bl-<pid>.<start>` beside the one bl is in), after
/// killing and removing any that a dead bl left, with an empty leaf in it
/// that a child joined. `None` where cgroup v2 is absent or not writable
/// here.
fn cgroup_home(me: &str) -> Option<(PathBuf, PathBuf)> {
    let parent = own_cgroup_dir()?;
    if let Ok(entries) = std::fs::read_dir(&parent) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if let Some(owner) = name.strip_prefix("bl-")
                && owner != me
                && !owner_alive(owner)
            {
                kill_cgroup_tree(&entry.path());
            }
        }
    }
    let home = parent.join(format!("bl-{me}"));
    std::fs::create_dir(&home).ok()?;
    // A leaf a child can be made, join and leave empty is what the mode
    // needs (a delegation rule or a controller may forbid it): try it.
    let probe = home.join("probe");
    let joined = std::fs::create_dir(&probe).is_ok()
        && open_leaf(&probe).is_ok_and(|(dir, procs)| probe_join(&dir, &procs));
    if !(joined && emptied(&probe)) {
        let _ = std::fs::remove_dir(&probe);
        let _ = std::fs::remove_dir(&home);
        return None;
    }
    Some((home, probe))
}

/// A leaf's directory (to start a child in it) and its `cgroup.procs` (for
/// a child to join it).
fn open_leaf(leaf: &Path) -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY)
        .open(leaf)?;
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(leaf.join("cgroup.procs"))?;
    Ok((dir, procs))
}

/// Whether a child can join the leaf whose directory and `cgroup.procs`
/// are open: one child, started as every command is (without copying bl's
/// memory), that exits where it would exec.
fn probe_join(leaf: &std::fs::File, procs: &std::fs::File) -> bool {
    let dir = std::env::temp_dir();
    let launch = crate::spawn::Launch {
        program: Path::new("/bin/true"),
        exit_before_exec: true,
        args: Vec::new(),
        env: Vec::new(),
        cwd: &dir,
        keep_fds: &[],
        steps: None,
        rlimits: false,
        cgroup_procs: Some(procs.as_raw_fd()),
        cgroup_dir: Some(leaf.as_raw_fd()),
    };
    crate::spawn::spawn(&launch).is_ok_and(|mut child| child.wait().is_ok_and(|s| s.success()))
}

/// Whether the bl named `<pid>.<start>` is still running.
fn owner_alive(owner: &str) -> bool {
    let Some((pid, start)) = owner.split_once('.') else {
        return true;
    };
    match (pid.parse::<i32>(), start.parse::<u64>()) {
        (Ok(pid), Ok(start)) => proc_stat(pid).is_some_and(|s| s.start == start),
        _ => true,
    }
}

/// The prefixes of the directories [`owned_tempdir`] makes.
pub const TEMP_PREFIXES: &[&str] = &["bl-cmd-", "bl-cage-", "bl-egress-"];

/// A private directory in the temporary directory, named for this process
/// (`<prefix><pid namespace>.<pid>.<start>-<random>`): dropped, it is
/// removed; left by a bl that was killed, a later bl in the same PID
/// namespace removes it once its first command has started, on a thread
/// of its own.
pub fn owned_tempdir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    owned_dir_in(&std::env::temp_dir(), prefix)
}

/// As [`owned_tempdir`], for a directory that only ever holds mount
/// points (a cage's private root, its staging directory): in memory where
/// the machine has a shared tmpfs ([`mount_point_root`]). Made and removed
/// for every command, on a disk that discards what is freed each costs
/// about 0.1 ms, on the way to the command and back.
pub fn owned_mount_point_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    owned_dir_in(mount_point_root(), prefix)
}

fn owned_dir_in(base: &Path, prefix: &str) -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!(
            "{prefix}{}.{}-",
            own_pid_namespace().unwrap_or(0),
            state().me
        ))
        .tempdir_in(base)
}

/// Once per process, when its first command has started (its directories
/// are made, and the command leaves the second core to the sweep): removes
/// what dead bls of this PID namespace left, on a thread of its own.
fn sweep_once() {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        if let Some(namespace) = own_pid_namespace() {
            let mut bases = vec![std::env::temp_dir(), mount_point_root().to_path_buf()];
            bases.dedup();
            let _ = std::thread::Builder::new()
                .name("bl-sweep".into())
                .spawn(move || {
                    for base in bases {
                        remove_dead_tempdirs(&base, namespace);
                    }
                });
        }
    });
}

/// Where [`owned_mount_point_dir`] makes its directories: for root (whose
/// files there no logout removes), `/dev/shm` when it is root's tmpfs that
/// anyone may write to and only an owner may remove from (mode 1777, as
/// `/tmp`), and `TMPDIR` was not set; else the temporary directory.
fn mount_point_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let shm = Path::new("/dev/shm");
        let shared_tmpfs = std::env::var_os("TMPDIR").is_none()
            && nix::unistd::geteuid().is_root()
            && std::fs::symlink_metadata(shm).is_ok_and(|m| {
                m.is_dir() && m.uid() == 0 && m.permissions().mode() & 0o7777 == 0o1777
            })
            && nix::sys::statfs::statfs(shm)
                .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
        if shared_tmpfs {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    })
}

/// This process's PID namespace (the inode of `/proc/self/ns/pid`), when
/// it and this process's start time can be read: whether the owner of a
/// directory named in another namespace (a container sharing `/tmp`) is
/// alive cannot be told from here.
fn own_pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    static NAMESPACE: OnceLock<Option<u64>> = OnceLock::new();
    *NAMESPACE.get_or_init(|| {
        own_start()?;
        std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
    })
}

/// Removes what a dead bl of this user and PID namespace left in `temp`:
/// only directories (never through a symlink) whose name says whose they
/// were.
fn remove_dead_tempdirs(temp: &Path, namespace: u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    let uid = nix::unistd::geteuid().as_raw();
    let here = format!("{namespace}.");
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((owner, _)) = TEMP_PREFIXES
            .iter()
            .find_map(|prefix| name.strip_prefix(prefix)?.strip_prefix(&here))
            .and_then(|rest| rest.split_once('-'))
        else {
            continue;
        };
        let ours = entry
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && !owner_alive(owner) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Kills every process in `dir` and below, then removes the directories.
fn kill_cgroup_tree(dir: &Path) {
    kill_cgroup(dir);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                kill_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = remove_when_empty(dir);
}

/// The pids in a cgroup (its own processes, not its children's).
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    read_kernel_file(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A file the kernel makes up as it is read (procfs, cgroupfs), read
/// whole. Such files report no size, so the standard library's look at
/// the size first (a statx) only cost a system call, several a command.
fn read_kernel_file(path: impl AsRef<Path>) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(512);
    // Through `take`, which reads to the end without asking the size.
    std::fs::File::open(path)?
        .take(u64::MAX)
        .read_to_string(&mut text)?;
    Ok(text)
}

fn populated(dir: &Path) -> bool {
    leaf_populated(dir).unwrap_or(false)
}

/// Whether the cgroup at `dir` holds a live process, when its
/// `cgroup.events` can be read.
fn leaf_populated(dir: &Path) -> Option<bool> {
    read_kernel_file(dir.join("cgroup.events"))
        .ok()
        .map(|e| e.lines().any(|l| l == "populated 1"))
}

/// SIGKILLs everything in `dir` and below: `cgroup.kill` where the kernel
/// has it, else each process in turn until none is left.
fn kill_cgroup(dir: &Path) {
    if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    let until = Instant::now() + GONE_WITHIN;
    loop {
        let pids = cgroup_pids(dir);
        if pids.is_empty() || Instant::now() >= until {
            return;
        }
        for pid in pids {
            // SAFETY: kill with a pid and a signal number.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn remove_when_empty(dir: &Path) -> std::io::Result<()> {
    let until = Instant::now() + GONE_WITHIN;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= until => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Whether the leaf at `dir` holds no process, waiting as long as killed
/// processes get to be gone.
fn emptied(dir: &Path) -> bool {
    let until = Instant::now() + GONE_WITHIN;
    loop {
        if !populated(dir) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A pidfd for `pid`: refers to that process and no later one of the same
/// number, so killing and reaping through it can never hit another.
fn pidfd(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: the kernel just returned this descriptor to us alone.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Waits (bounded) for the processes behind `fds` to end, then reaps the
/// orphans bl adopted: a subreaper must, or they stay zombies.
fn reap(fds: Vec<OwnedFd>) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let until = Instant::now() + GONE_WITHIN;
    for fd in fds {
        let left = until.saturating_duration_since(Instant::now());
        let mut polled = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        let timeout = PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::ZERO);
        let _ = poll(&mut polled, timeout);
    }
    reap_adopted();
}

/// Reaps every zombie child of bl's that no one else waits for: not a
/// command bl started (its supervisor reaps it), not the watchdog.
pub fn reap_adopted() {
    if !claims_orphans() {
        return;
    }
    let state = state();
    // Held while scanning: a command starting now registers under it, so
    // its child is never taken for an orphan.
    let children = lock(&state.children);
    for pid in adopted_children() {
        if children.contains(&pid) || proc_stat(pid).is_none_or(|s| s.state != 'Z') {
            continue;
        }
        // SAFETY: reaping a zombie child of ours that nothing else waits for.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    }
}

/// One command's containment, from before it starts until it has ended.
pub(crate) struct Contained {
    id: u64,
    leaf: Option<PathBuf>,
    /// The leaf's directory, to start the child in it, and its
    /// `cgroup.procs`, for a child to join it before it execs.
    procs: Option<(std::fs::File, std::fs::File)>,
    marker: String,
    pid: Option<i32>,
    ended: bool,
    /// Whether `cgroup.kill` was written to the leaf: such a leaf is never
    /// used again. (On Linux 6.14 and later a child started straight into
    /// a cgroup that was once killed is killed at birth: its kill count is
    /// read from its parent's cgroup, not from the one it is started in.)
    killed: std::sync::atomic::AtomicBool,
    /// Whether `kill_rest` found the leaf empty: nothing is left to enter
    /// it, so it needs no second look when the command ends.
    found_empty: std::sync::atomic::AtomicBool,
}

/// Whether child `pid` has exited, without reaping it: `None` while it
/// runs; once it has, how (`CLD_EXITED`, `CLD_KILLED`, …), or `None`
/// inside when it cannot be asked (it was reaped already: gone).
fn peek_exit(pid: i32) -> Option<Option<i32>> {
    // SAFETY: a zeroed siginfo is a valid out-parameter; WNOWAIT leaves
    // the child to be reaped by its supervisor.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        if rc != 0 {
            Some(None)
        } else if info.si_pid() != 0 {
            Some(Some(info.si_code))
        } else {
            None
        }
    }
}

impl Contained {
    /// Prepares a command's containment (its leaf, where cgroups are used).
    pub(crate) fn new() -> Contained {
        let state = state();
        let id = state.next.fetch_add(1, Ordering::Relaxed);
        let (leaf, procs) = match state.mode() {
            Mode::Cgroup(home) => {
                let spare = lock(&state.spare_leaves).pop();
                let (leaf, made) = match spare {
                    Some(leaf) => (leaf, Ok(())),
                    None => {
                        let leaf = home.join(format!("c{id}"));
                        let made = std::fs::create_dir(&leaf);
                        (leaf, made)
                    }
                };
                match made.and_then(|_| open_leaf(&leaf)) {
                    Ok(procs) => (Some(leaf), Some(procs)),
                    Err(_) => {
                        let _ = std::fs::remove_dir(&leaf);
                        (None, None)
                    }
                }
            }
            Mode::Walk => (None, None),
        };
        Contained {
            id,
            leaf,
            procs,
            marker: format!("{}.{id}", state.me),
            pid: None,
            ended: false,
            killed: std::sync::atomic::AtomicBool::new(false),
            found_empty: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The descriptor the child writes `0` to, joining its leaf.
    pub(crate) fn procs_fd(&self) -> Option<RawFd> {
        self.procs.as_ref().map(|(_, procs)| procs.as_raw_fd())
    }

    /// The leaf's directory, where `spawn` can start the child outright.
    pub(crate) fn leaf_dir_fd(&self) -> Option<RawFd> {
        self.procs.as_ref().map(|(dir, _)| dir.as_raw_fd())
    }

    /// The marker the subreaper walk finds the command's orphans by (set in
    /// the command's environment when there is no leaf).
    pub(crate) fn marker(&self) -> Option<(String, OsString)> {
        self.leaf
            .is_none()
            .then(|| (MARKER_VAR.to_string(), OsString::from(&self.marker)))
    }

    /// Starts the command with `spawn`, which returns the child and its
    /// pid (the leader of its own process group). The child is registered
    /// before any reaper can look, so it is never taken for an orphan.
    pub(crate) fn spawn<T, E>(
        &mut self,
        spawn: impl FnOnce() -> Result<(T, i32), E>,
    ) -> Result<T, E> {
        let state = state();
        let mut children = lock(&state.children);
        let before = boot_ticks();
        let (child, pid) = spawn()?;
        let after = boot_ticks();
        children.insert(pid);
        drop(children);
        // The kernel stamps the child's start during the clone: bracketed
        // within one tick, that tick is its start, and /proc need not be
        // asked (a file to open and format, every command).
        self.started(pid, before.filter(|_| before == after));
        Ok(child)
    }

    fn started(&mut self, pid: i32, start: Option<u64>) {
        let state = state();
        self.pid = Some(pid);
        // The child has joined its leaf (or failed to start): bl keeps no
        // descriptor it could be handed by mistake.
        self.procs = None;
        lock(&state.live).insert(self.id, pid);
        watchdog_tell(Tell::Watch(pid));
        sweep_once();
        let mut logs = lock(&state.spawn_logs);
        if !logs.is_empty() {
            let start = start.or_else(|| proc_stat(pid).map(|s| s.start));
            let line = serde_json::json!({
                "boot_id": state.boot_id, "cgroup": self.leaf, "controller": state.me,
                "pgid": pid, "pid": pid, "start": start,
            });
            let line = format!("{line}\n");
            for log in logs.iter_mut() {
                if log.file.is_none() {
                    log.file = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&log.path)
                        .ok();
                }
                if let Some(file) = &mut log.file {
                    let _ = file.write_all(line.as_bytes());
                }
            }
        }
    }

    /// The stop `requested` (the operator's signal, if any) as it bears on
    /// this command: it cuts the command short only if the command has not
    /// ended within `grace`. A command that ends by itself by then, its
    /// output whole, ran to its end (a finished agent turn is kept, never
    /// paid for again). Asked before anything is killed.
    pub(crate) fn cut_short_by(&self, requested: Option<i32>, grace: Duration) -> Option<i32> {
        requested.filter(|_| !(self.exited(grace) && self.exited_by_itself()))
    }

    /// Whether the command's child, which has exited, called exit: one a
    /// signal ended (the stop's SIGTERM sent to the whole service, say)
    /// did not finish by itself. Left unreaped, as [`exited`] leaves it.
    ///
    /// [`exited`]: Contained::exited
    fn exited_by_itself(&self) -> bool {
        self.pid
            .is_some_and(|pid| peek_exit(pid) == Some(Some(libc::CLD_EXITED)))
    }

    /// Whether the command's direct child has exited, waiting at most
    /// `limit`; it is left unreaped (a zombie), so its process group's
    /// number cannot be given to another process while [`kill_rest`]
    /// aims at it.
    ///
    /// [`kill_rest`]: Contained::kill_rest
    pub(crate) fn exited(&self, limit: Duration) -> bool {
        let Some(pid) = self.pid else {
            return true;
        };
        let until = Instant::now() + limit;
        // Woken the moment it exits (a pidfd polls readable then), not at
        // the next of a string of short sleeps; without pidfds (before
        // Linux 5.3) the sleeps remain.
        // SAFETY: pidfd_open takes a pid and flags and returns a new
        // descriptor, owned here.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd >= 0 {
            // SAFETY: the kernel just returned this descriptor to us alone.
            let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(pidfd as RawFd) };
            let mut wanted = libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let millis = limit.as_millis().min(i32::MAX as u128) as libc::c_int;
            // SAFETY: one pollfd, valid for the call. An interrupted poll
            // falls through to the check below, as a timeout does.
            unsafe { libc::poll(&mut wanted, 1, millis) };
        }
        loop {
            if peek_exit(pid).is_some() {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(2)));
        }
    }

    /// Kills every process of the command's now (its direct child too),
    /// without waiting: when it ended, timed out or was interrupted, so no
    /// process it left holds its output open. Called only before its direct
    /// child is reaped.
    pub(crate) fn kill_rest(&self) {
        let Some(pid) = self.pid else {
            return;
        };
        // SAFETY: killpg with a group id and a signal number.
        unsafe { libc::killpg(pid, libc::SIGKILL) };
        match &self.leaf {
            // An empty leaf has nothing to kill, and stays fit to be used
            // again (see `killed`).
            Some(leaf) => match leaf_populated(leaf) {
                Some(true) => self.kill_leaf(leaf),
                Some(false) => self.found_empty.store(true, Ordering::Relaxed),
                // Unread: the end of the command looks again.
                None => {}
            },
            None => kill_marked_orphans(&self.marker, self.pid),
        }
    }

    fn kill_leaf(&self, leaf: &Path) {
        self.killed.store(true, Ordering::Relaxed);
        kill_cgroup(leaf);
    }

    /// Ends whatever the command left running and reaps it. Called once its
    /// direct child has been waited for.
    pub(crate) fn end(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        let state = state();
        if let Some(pid) = self.pid {
            // Its supervisor has reaped it (having ended its group first):
            // from here on its number may be another's, so no killpg.
            lock(&state.children).remove(&pid);
        }
        match &self.leaf {
            Some(leaf) => {
                // Nothing bl does puts a process in a leaf once it is
                // empty, and only one inside could start another there.
                let left_running = !self.found_empty.load(Ordering::Relaxed) && populated(leaf);
                if left_running {
                    let fds: Vec<OwnedFd> =
                        cgroup_pids(leaf).into_iter().filter_map(pidfd).collect();
                    self.kill_leaf(leaf);
                    reap(fds);
                }
                // Empty and never killed, it serves the next command; one
                // a process would not leave is never given to another.
                if !self.killed.load(Ordering::Relaxed) && !left_running {
                    lock(&state.spare_leaves).push(leaf.clone());
                } else {
                    let _ = remove_when_empty(leaf);
                }
            }
            None => {
                if self.pid.is_some() {
                    kill_marked_orphans(&self.marker, self.pid);
                }
            }
        }
        if let Some(pid) = self.pid {
            watchdog_tell(Tell::Forget(pid));
        }
        let alone = {
            let mut live = lock(&state.live);
            live.remove(&self.id);
            live.is_empty()
        };
        // With no other command running, every orphan bl adopted came from
        // this one, however it hid (a cleared marker, a cgroup it left).
        if alone && self.pid.is_some() {
            kill_orphans();
        }
        reap_adopted();
    }
}

/// Kills every process bl adopted (not a command it started, not its
/// watchdog), with everything below it.
fn kill_orphans() {
    if !claims_orphans() {
        return;
    }
    // Held while the orphans are found and killed: a command another
    // thread starts now forks under this lock, so it is either registered
    // already or not yet a child (it was once killed as an orphan here).
    let killed = {
        let children = lock(&state().children);
        let orphans: Vec<i32> = adopted_children()
            .into_iter()
            .filter(|pid| !children.contains(pid))
            .filter(|pid| proc_stat(*pid).is_some_and(|s| s.state != 'Z'))
            .collect();
        if orphans.is_empty() {
            // Most of the time: no walk of every process for nothing.
            return;
        }
        kill_trees_unreaped(&orphans)
    };
    reap(killed);
}

impl Drop for Contained {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The children bl adopted as a subreaper, with any other child of its
/// main thread, by the kernel's account. An orphan is always given to the
/// first live thread of the reaping process, its main thread, so only
/// that thread's list is read: one file, not one per thread, at every
/// command's end.
fn adopted_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    if let Ok(text) = read_kernel_file(format!("/proc/self/task/{me}/children")) {
        return text
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .collect();
    }
    all_processes()
        .into_iter()
        .filter(|(_, s)| s.ppid == me)
        .map(|(p, _)| p)
        .collect()
}

fn all_processes() -> Vec<(i32, ProcStat)> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter_map(|pid| Some((pid, proc_stat(pid)?)))
                .collect()
        })
        .unwrap_or_default()
}

fn carries_marker(pid: i32, marker: &str) -> bool {
    let wanted = format!("{MARKER_VAR}={marker}");
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        env.split(|b| *b == 0)
            .any(|entry| entry == wanted.as_bytes())
    })
}

/// The subreaper walk: every orphan bl adopted that came from this command
/// (its process group, or its marker), and everything below it, killed
/// and reaped.
fn kill_marked_orphans(marker: &str, pgid: Option<i32>) {
    let children = lock(&state().children).clone();
    let orphans: Vec<i32> = adopted_children()
        .into_iter()
        .filter(|pid| !children.contains(pid))
        .filter(|pid| {
            proc_stat(*pid).is_some_and(|s| Some(s.pgid) == pgid) || carries_marker(*pid, marker)
        })
        .collect();
    if !orphans.is_empty() {
        kill_trees(&orphans);
    }
}

/// SIGKILLs `roots` and all their descendants, then reaps what bl adopted.
fn kill_trees(roots: &[i32]) {
    reap(kill_trees_unreaped(roots));
}

/// SIGKILLs `roots` and all their descendants; returns a pidfd for each,
/// to wait on.
fn kill_trees_unreaped(roots: &[i32]) -> Vec<OwnedFd> {
    let table = all_processes();
    let mut doomed: Vec<i32> = roots.to_vec();
    let mut i = 0;
    while i < doomed.len() {
        let parent = doomed[i];
        let below: Vec<i32> = table
            .iter()
            .filter(|(pid, s)| s.ppid == parent && !doomed.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        doomed.extend(below);
        i += 1;
    }
    let fds: Vec<OwnedFd> = doomed.iter().copied().filter_map(pidfd).collect();
    for pid in &doomed {
        // SAFETY: kill with a pid and a signal number.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    fds
}

/// SIGKILLs every contained command alive now, at once (a second signal:
/// bl is about to exit without waiting for them).
pub fn kill_all() {
    let Some(state) = STATE.get() else {
        return;
    };
    if let Some(Mode::Cgroup(home)) = state.mode.get() {
        kill_cgroup(home);
    }
    for pgid in lock(&state.live).values() {
        // SAFETY: killpg with a group id and a signal number.
        unsafe { libc::killpg(*pgid, libc::SIGKILL) };
    }
}

/// Reads a spawn log that earlier controllers of the same run wrote, and
/// kills everything of theirs still alive: each command's cgroup, what is
/// left of each command's process group (started no earlier than it), and
/// every process carrying one of their markers, with what runs below.
/// Returns how many processes it ended. (A dead bl's own cgroup is ended
/// anyway when the next bl starts containing commands.)
pub fn kill_survivors(log: &Path) -> usize {
    let Ok(text) = std::fs::read_to_string(log) else {
        return 0;
    };
    let boot = boot_id();
    let me = state().me.clone();
    let parent = own_cgroup_dir();
    let table = all_processes();
    let mut doomed: Vec<i32> = Vec::new();
    let mut controllers: HashSet<String> = HashSet::new();
    // Each process once: a member of a killed cgroup is often in a
    // recorded process group too.
    let mut ended: HashSet<i32> = HashSet::new();
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(controller) = entry["controller"].as_str() else {
            continue;
        };
        // Only what a controller that is gone left: never a live bl's.
        if entry["boot_id"].as_str() != Some(boot.as_str())
            || controller == me
            || owner_alive(controller)
        {
            continue;
        }
        controllers.insert(controller.to_string());
        // A leaf of that controller's own cgroup, and nothing else.
        if let (Some(dir), Some(parent)) = (entry["cgroup"].as_str().map(Path::new), &parent)
            && dir.parent() == Some(parent.join(format!("bl-{controller}")).as_path())
            && dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('c') && n[1..].parse::<u64>().is_ok())
            && dir.is_dir()
        {
            ended.extend(cgroup_pids(dir));
            kill_cgroup_tree(dir);
        }
        // What is left of its process group: while any member lives, the
        // group's number cannot be given to another process, so members
        // are its own when the leader is the recorded one or is gone.
        let (Some(pgid), Some(start)) = (
            entry["pgid"].as_i64().and_then(|p| i32::try_from(p).ok()),
            entry["start"].as_u64(),
        ) else {
            continue;
        };
        let leader_is_ours = match proc_stat(pgid) {
            Some(leader) => leader.start == start,
            None => true,
        };
        if leader_is_ours {
            doomed.extend(
                table
                    .iter()
                    .filter(|(_, s)| s.pgid == pgid)
                    .map(|(pid, _)| *pid),
            );
        }
    }
    for (pid, _) in &table {
        let marked = std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
            env.split(|b| *b == 0).any(|entry| {
                controllers
                    .iter()
                    .any(|c| entry.starts_with(format!("{MARKER_VAR}={c}.").as_bytes()))
            })
        });
        if marked {
            doomed.push(*pid);
        }
    }
    doomed.sort_unstable();
    doomed.dedup();
    ended.extend(&doomed);
    if !doomed.is_empty() {
        kill_trees(&doomed);
    }
    ended.len()
}

// The watchdog: a process of its own that outlives bl by a moment. It reads
// a pipe whose only writer is bl; when bl ends (by any means) the pipe
// closes and the watchdog kills bl's cgroup and every process group bl had
// not yet seen end. It is bl's own binary, started as `bl-watchdog` (so a
// `pkill -f` aimed at a bl command line spares it), which the binary's
// `main` hands to [`watchdog_main`].

/// The name the watchdog runs under (its `argv[0]`).
pub const WATCHDOG_NAME: &str = "bl-watchdog";

static WATCHDOG_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// The program that runs [`watchdog_main`] when started as
/// [`WATCHDOG_NAME`]; without one, no watchdog is started (the cgroup and
/// the direct children's death signal still hold while bl lives).
pub fn set_watchdog_program(program: PathBuf) {
    let _ = WATCHDOG_PROGRAM.set(program);
}

struct Watchdog {
    writer: std::fs::File,
}

enum Tell {
    Watch(i32),
    Forget(i32),
}

/// Decides how commands are contained (which makes bl's cgroup) and starts
/// the watchdog, where the first command would otherwise wait for both.
/// Called on a thread of its own ahead of that command.
pub fn prepare() {
    drop(watchdog());
}

/// The watchdog, started if it was not.
fn watchdog() -> std::sync::MutexGuard<'static, Option<Watchdog>> {
    let state = state();
    let mut guard = lock(&state.watchdog);
    if guard.is_none() {
        *guard = start_watchdog(state.mode(), &state.children);
    }
    guard
}

fn watchdog_tell(tell: Tell) {
    let mut guard = watchdog();
    if let Some(w) = guard.as_mut() {
        let record = match tell {
            Tell::Watch(pgid) => pgid,
            Tell::Forget(pgid) => -pgid,
        };
        let _ = w.writer.write_all(&record.to_ne_bytes());
    }
}

fn start_watchdog(mode: &Mode, children: &Mutex<HashSet<i32>>) -> Option<Watchdog> {
    // (Called with the watchdog lock held, after the state was made.)
    use std::os::unix::process::CommandExt;
    let program = WATCHDOG_PROGRAM.get()?;
    let mut command = std::process::Command::new(program);
    command
        .arg0(WATCHDOG_NAME)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        // Out of bl's process group: a kill aimed at bl's group spares it.
        .process_group(0);
    match mode {
        Mode::Cgroup(home) => command.arg("--cgroup").arg(home),
        Mode::Walk => command.arg("--marked").arg(format!("{}.", state().me)),
    };
    // The children lock is held: the watchdog is never taken for an orphan.
    let mut kids = lock(children);
    let mut child = command.spawn().ok()?;
    kids.insert(child.id() as i32);
    let writer = std::fs::File::from(std::os::fd::OwnedFd::from(child.stdin.take()?));
    // Its status is never waited for: it outlives bl by design, and while
    // bl lives it only reads. Dropping the handle does not kill it.
    Some(Watchdog { writer })
}

/// The watchdog's body: `bl-watchdog (--cgroup DIR | --marked PREFIX)`.
/// Reads process groups to watch from stdin (4-byte records: a pgid to
/// watch, its negation to forget it) until bl closes it, then kills what is
/// left: bl's cgroup (and removes it), or every process whose marker starts
/// with PREFIX, with what runs below it.
pub fn watchdog_main() -> ! {
    use std::io::Read;
    // Batch work: woken by bl's exit, it does not preempt bl's last thread
    // while that still gives back bl's memory (bl's run ended only after
    // the watchdog's kill work and exit); it runs at its CPU's next turn,
    // a few ms at most.
    let batch = libc::sched_param { sched_priority: 0 };
    // SAFETY: sets this process's own policy from a valid parameter.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &batch) };
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: ignoring a signal installs no handler.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let home = value("--cgroup").map(PathBuf::from);
    let marked = value("--marked").map(|m| m.to_string_lossy().into_owned());
    let mut watched: HashSet<i32> = HashSet::new();
    let mut stdin = std::io::stdin().lock();
    let mut record = [0u8; 4];
    while stdin.read_exact(&mut record).is_ok() {
        match i32::from_ne_bytes(record) {
            pgid if pgid > 0 => {
                watched.insert(pgid);
            }
            pgid => {
                watched.remove(&-pgid);
            }
        }
    }
    if let Some(home) = &home {
        kill_cgroup_tree(home);
    }
    for pgid in watched {
        // SAFETY: killpg with a group id and a signal number.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
    }
    if let Some(prefix) = marked {
        let wanted = format!("{MARKER_VAR}={prefix}");
        let roots: Vec<i32> = all_processes()
            .into_iter()
            .map(|(pid, _)| pid)
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    env.split(|b| *b == 0)
                        .any(|entry| entry.starts_with(wanted.as_bytes()))
                })
            })
            .collect();
        // Not bl's to reap: their new parent does.
        kill_trees_unreaped(&roots);
    }
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a killed bl left in the temporary directory goes; a live bl's,
    /// another PID namespace's, a name that says no owner, and a symlink
    /// stay.
    #[test]
    fn only_the_temporary_directories_of_a_dead_bl_are_removed() {
        let temp = tempfile::tempdir().unwrap();
        let ns = own_pid_namespace().unwrap();
        let me = &state().me;
        let dead = temp.path().join(format!("bl-cmd-{ns}.2147483646.1-dead"));
        let live = temp.path().join(format!("bl-cage-{ns}.{me}-live"));
        let other_namespace = temp
            .path()
            .join(format!("bl-cmd-{}.2147483646.1-x", ns + 1));
        let unnamed = temp.path().join("bl-cmd-Ab3xYz");
        let elsewhere = tempfile::tempdir().unwrap();
        let link = temp.path().join(format!("bl-cmd-{ns}.2147483645.1-link"));
        for dir in [&dead, &live, &other_namespace, &unnamed] {
            std::fs::create_dir_all(dir.join("home")).unwrap();
            std::fs::write(dir.join("home/kept"), "x").unwrap();
        }
        std::fs::write(elsewhere.path().join("kept"), "x").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &link).unwrap();
        remove_dead_tempdirs(temp.path(), ns);
        assert!(!dead.exists(), "a dead bl's directory is removed");
        assert!(live.join("home/kept").exists());
        assert!(other_namespace.join("home/kept").exists());
        assert!(unnamed.join("home/kept").exists());
        assert!(link.symlink_metadata().is_ok());
        assert!(elsewhere.path().join("kept").exists());
    }

    /// A stop cuts short a command still running, never one that had
    /// already ended (its output is whole).
    #[test]
    fn a_stop_cuts_short_only_a_command_still_running() {
        let spawn_in = |contained: &mut Contained, args: &[&str]| {
            contained
                .spawn(|| {
                    std::process::Command::new(args[0])
                        .args(&args[1..])
                        .spawn()
                        .map(|c| {
                            let pid = c.id() as i32;
                            (c, pid)
                        })
                })
                .unwrap()
        };
        let now = Duration::ZERO;
        let mut ended = Contained::new();
        let mut done = spawn_in(&mut ended, &["/bin/true"]);
        assert!(ended.exited(Duration::from_secs(10)));
        assert_eq!(ended.cut_short_by(Some(libc::SIGINT), now), None);
        assert_eq!(ended.cut_short_by(None, now), None);
        done.wait().unwrap();
        // One that ends within the grace the stop gives it ran to its end.
        let mut ending = Contained::new();
        let mut soon = spawn_in(&mut ending, &["/bin/sleep", "0.1"]);
        assert_eq!(
            ending.cut_short_by(Some(libc::SIGINT), Duration::from_secs(10)),
            None
        );
        soon.wait().unwrap();
        // One a signal ends within the grace (the stop's own SIGTERM, sent
        // to it too) did not finish by itself.
        let mut signalled = Contained::new();
        let mut killed = spawn_in(&mut signalled, &["/bin/sh", "-c", "kill -TERM $$"]);
        assert_eq!(
            signalled.cut_short_by(Some(libc::SIGTERM), Duration::from_secs(10)),
            Some(libc::SIGTERM)
        );
        killed.wait().unwrap();
        let mut running = Contained::new();
        let mut busy = spawn_in(&mut running, &["/bin/sleep", "30"]);
        assert_eq!(running.cut_short_by(None, now), None);
        assert_eq!(
            running.cut_short_by(Some(libc::SIGINT), Duration::from_millis(50)),
            Some(libc::SIGINT)
        );
        busy.kill().unwrap();
        busy.wait().unwrap();
    }

    #[test]
    fn stat_fields_follow_the_last_parenthesis() {
        let me = proc_stat(std::process::id() as i32).unwrap();
        assert!(me.start > 0);
        assert_eq!(me.ppid, nix::unistd::getppid().as_raw());
    }

    /// The start /proc reports lies between the boot-clock ticks read
    /// before and after the clone: within one tick, that tick is it (what
    /// the spawn log records without asking /proc).
    #[test]
    fn a_child_starts_between_the_ticks_read_around_its_clone() {
        let mut bracketed = 0;
        for _ in 0..50 {
            let before = boot_ticks().unwrap();
            let mut child = std::process::Command::new("/bin/sleep")
                .arg("5")
                .spawn()
                .unwrap();
            let after = boot_ticks().unwrap();
            let start = proc_stat(child.id() as i32).unwrap().start;
            assert!(
                (before..=after).contains(&start),
                "started at tick {start}, outside {before}..={after}"
            );
            bracketed += usize::from(before == after);
            child.kill().unwrap();
            child.wait().unwrap();
        }
        assert!(bracketed > 0, "no clone fell within one tick in 50");
    }
}
