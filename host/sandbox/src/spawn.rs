//! Starting a caged command without copying bl's address space.
//!
//! A cage needs steps between fork and exec (rlimits, the seccomp
//! descriptors kept across exec, and, run by root, the private mount
//! namespace and the drop to the caged user). With a `pre_exec` hook the
//! standard library forks, which copies the page tables of a process that
//! may hold a whole graph run in memory, and then makes every page the
//! parent writes fault once more. Here the child shares bl's memory until
//! it execs (`clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn` does), on a
//! stack of its own, running only async-signal-safe system calls on data
//! prepared beforehand.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use bl_core::CommandError;
use nix::libc;

use crate::caged_user::ChildSteps;

/// The rlimits every cage starts under: a cap on processes against fork
/// bombs, and on the size of any file written against disk filling.
pub(crate) const CAGE_RLIMITS: [(nix::sys::resource::Resource, u64); 2] = [
    (nix::sys::resource::Resource::RLIMIT_NPROC, 4096),
    (nix::sys::resource::Resource::RLIMIT_FSIZE, 1 << 30),
];

/// What the child runs, all of it allocated before the clone.
pub(crate) struct Launch<'a> {
    pub program: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<(String, std::ffi::OsString)>,
    pub cwd: &'a Path,
    /// Descriptors the command must inherit (their close-on-exec flag is
    /// cleared in the child only).
    pub keep_fds: &'a [RawFd],
    pub steps: Option<&'a ChildSteps>,
    /// The cage's rlimits (a cap on processes, on file sizes).
    pub rlimits: bool,
    /// The command's cgroup leaf (`cgroup.procs`), joined before exec.
    pub cgroup_procs: Option<RawFd>,
    /// The same leaf's directory: where the kernel can start the child
    /// (`clone3` with `CLONE_INTO_CGROUP`) so that it never has to join.
    pub cgroup_dir: Option<RawFd>,
    /// The child exits (0) where it would exec: a trial of every step
    /// before, for the price of no program's start.
    pub exit_before_exec: bool,
}

/// A running child with piped stdio, in its own process group.
pub(crate) struct Spawned {
    pid: libc::pid_t,
    pub stdin: Option<File>,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
    status: Option<ExitStatus>,
}

fn c_string(bytes: &[u8], what: &str) -> Result<CString, CommandError> {
    CString::new(bytes).map_err(|_| CommandError::Spawn(format!("{what} holds a NUL byte")))
}

fn pipe() -> Result<(OwnedFd, OwnedFd), CommandError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| CommandError::Spawn(format!("pipe: {e}")))
}

/// Keeps the calling thread on the CPU it is on, so that a child it starts
/// and then waits for starts there too, at once.
///
/// A new task is placed on the least busy CPU as the clone is made, while
/// the parent still runs; the parent then sleeps (a vforked child's parent
/// until the exec, a reaper in `waitpid`), and the CPU it leaves idle does
/// not take the child over from a busy one: a CPU idle for less than the
/// kernel's migration cost (0.5 ms) does not look for work. On 2 cores the
/// child waited up to 0.5 ms behind another task while the parent's CPU
/// stood idle. The child inherits the one-CPU mask and gives it up first
/// ([`Pinned::unpin_child`]); the parent gives it up on drop.
pub(crate) struct Pinned {
    saved: Option<libc::cpu_set_t>,
}

impl Pinned {
    /// Pins the calling thread to its CPU; does nothing where it already
    /// has one only, or the kernel says no.
    pub(crate) fn here() -> Pinned {
        // SAFETY: a zeroed cpu_set_t is an empty set, filled by the call.
        let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: reads this thread's mask into `saved`; sched_getcpu has
        // no preconditions.
        let (got, cpu) = unsafe {
            (
                libc::sched_getaffinity(0, size, &mut saved),
                libc::sched_getcpu(),
            )
        };
        // SAFETY: CPU_COUNT only reads the set.
        if got < 0 || cpu < 0 || unsafe { libc::CPU_COUNT(&saved) } < 2 {
            return Pinned { saved: None };
        }
        // SAFETY: an empty set, then the CPU sched_getcpu named (below
        // CPU_SETSIZE), then this thread's mask set to a CPU it runs on.
        let pinned = unsafe {
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut one);
            libc::sched_setaffinity(0, size, &one) == 0
        };
        Pinned {
            saved: pinned.then_some(saved),
        }
    }

    /// In the child, first: the mask its parent had. Async-signal-safe
    /// (one system call on memory the parent keeps alive).
    pub(crate) fn unpin_child(&self) {
        if let Some(saved) = &self.saved {
            // SAFETY: sets the calling task's mask to one it was allowed.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), saved) };
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.unpin_child();
    }
}

/// The child's side: every pointer it follows was made by the parent.
struct ChildPlan {
    program: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    stdio: [RawFd; 3],
    keep_fds: Vec<RawFd>,
    steps: Option<*const ChildSteps>,
    error_fd: RawFd,
    rlimits: bool,
    cgroup_procs: RawFd,
    /// bl's pid: the child dies with it, and never starts after it died.
    parent: libc::pid_t,
    exit_before_exec: bool,
    /// bl as a pidfd, for a child in a pid namespace of its own, which
    /// cannot see bl's pid (-1 otherwise).
    parent_pidfd: RawFd,
    /// The parent's CPU mask, which the child takes back.
    pinned: *const Pinned,
}

/// The signals whose disposition the child resets: SIGPIPE, which Rust
/// ignores and a command expects to stop it, and, unless the kernel reset
/// them at the clone (`CLONE_CLEAR_SIGHAND`), every handler bl installed,
/// which a signal arriving between clone and exec must not run in the child.
fn caught_signals() -> Vec<libc::c_int> {
    (1..=libc::SIGRTMAX())
        .filter(|&sig| {
            // SAFETY: a zeroed sigaction is a valid out-parameter.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: only reads the disposition of `sig` into `old`.
            let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
            rc == 0 && old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN
        })
        .chain([libc::SIGPIPE])
        .collect()
}

extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the plan the parent keeps alive until this child
    // has exec'd or exited (CLONE_VFORK); only async-signal-safe calls.
    unsafe {
        let plan = &*(arg as *const (ChildPlan, Vec<libc::c_int>));
        let (plan, caught) = (&plan.0, &plan.1);
        if let Some(pinned) = plan.pinned.as_ref() {
            pinned.unpin_child();
        }
        let fail = |errno: libc::c_int| -> ! {
            let bytes = errno.to_ne_bytes();
            libc::write(plan.error_fd, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127)
        };
        let errno = || *libc::__errno_location();
        for &sig in caught {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &default, std::ptr::null_mut());
        }
        for (target, &fd) in plan.stdio.iter().enumerate() {
            let target = target as RawFd;
            let rc = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if rc < 0 {
                fail(errno());
            }
        }
        let cage = plan.steps.and_then(|steps| (*steps).cage());
        // A cage bl makes itself starts a session, as bubblewrap's
        // `--new-session` does (its group keeps this process's number).
        let grouped = if cage.is_some() {
            libc::setsid()
        } else {
            libc::setpgid(0, 0)
        };
        if grouped < 0 {
            fail(errno());
        }
        if plan.rlimits {
            for (resource, limit) in CAGE_RLIMITS {
                let limit = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(resource as _, &limit) < 0 {
                    fail(errno());
                }
            }
        }
        // Into its own cgroup leaf while still bl's user (a caged user
        // could not write bl's cgroup files).
        if plan.cgroup_procs >= 0 && libc::write(plan.cgroup_procs, c"0".as_ptr().cast(), 1) < 0 {
            fail(errno());
        }
        // No descriptor of bl's reaches the command but those it keeps,
        // whoever opened one without close-on-exec (kernels before 5.11
        // lack close_range: there, every descriptor is opened with it).
        libc::syscall(libc::SYS_close_range, 3, u32::MAX, CLOSE_RANGE_CLOEXEC);
        for &fd in &plan.keep_fds {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                fail(errno());
            }
        }
        if let Some(steps) = plan.steps
            && let Err(e) = (*steps).run()
        {
            fail(e.raw_os_error().unwrap_or(libc::EPERM));
        }
        // After the drop to the caged user, which would clear it: the
        // command dies with bl, and does not start if bl already died.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 {
            fail(errno());
        }
        let parent_gone = if plan.parent_pidfd >= 0 {
            let mut poll = libc::pollfd {
                fd: plan.parent_pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            libc::poll(&mut poll, 1, 0) != 0
        } else {
            libc::getppid() != plan.parent
        };
        if parent_gone {
            fail(libc::ESRCH);
        }
        if libc::chdir(plan.cwd.as_ptr()) < 0 {
            fail(errno());
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        if plan.exit_before_exec {
            libc::_exit(0);
        }
        // Last, so that every step before may make the calls it refuses.
        if let Some(cage) = cage
            && (libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    cage.seccomp(),
                ) < 0)
        {
            fail(errno());
        }
        libc::execve(
            plan.program.as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
        );
        fail(errno())
    }
}

thread_local! {
    /// The stack this thread's last child started on, for its next: no
    /// mapping made, guarded and unmapped, and no page faulted in again,
    /// for every command.
    static SPARE_STACK: std::cell::Cell<Option<Stack>> = const { std::cell::Cell::new(None) };
}

/// The child's stack: its own mapping, with a guard page below it.
pub(crate) struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    const LEN: usize = 256 << 10;

    pub(crate) fn new() -> Result<Self, CommandError> {
        // SAFETY: a fresh anonymous mapping, released in Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(CommandError::Spawn(format!(
                "child stack: {}",
                std::io::Error::last_os_error()
            )));
        }
        let stack = Stack {
            base,
            len: Self::LEN,
        };
        // SAFETY: the lowest page of the mapping just made.
        if unsafe { libc::mprotect(base, 4096, libc::PROT_NONE) } < 0 {
            return Err(CommandError::Spawn(format!(
                "child stack guard: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(stack)
    }

    pub(crate) fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping; the stack grows down and
        // the length keeps it 16-byte aligned.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer in use once the
        // vforked child has exec'd or exited.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Starts `launch` with piped stdio in a new process group.
pub(crate) fn spawn(launch: &Launch) -> Result<Spawned, CommandError> {
    let program_name = launch.program.display().to_string();
    let program = c_string(launch.program.as_os_str().as_bytes(), "the program path")?;
    let args: Vec<CString> = std::iter::once(Ok(program.clone()))
        .chain(
            launch
                .args
                .iter()
                .map(|a| c_string(a.as_bytes(), "an argument")),
        )
        .collect::<Result<_, _>>()?;
    let env: Vec<CString> = launch
        .env
        .iter()
        .map(|(k, v)| {
            let mut pair = k.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(OsStr::as_bytes(v));
            c_string(&pair, "an environment variable")
        })
        .collect::<Result<_, _>>()?;
    let (stdin_r, stdin_w) = pipe()?;
    let (stdout_r, stdout_w) = pipe()?;
    let (stderr_r, stderr_w) = pipe()?;
    let (error_r, error_w) = pipe()?;
    let pointers = |strings: &[CString]| -> Vec<*const libc::c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain([std::ptr::null()])
            .collect()
    };
    let namespaces = launch.steps.map_or(0, ChildSteps::clone_flags);
    let parent_pidfd = match launch.steps {
        Some(steps) if steps.new_pid_namespace() => Some(own_pidfd()?),
        _ => None,
    };
    let mut plan = (
        ChildPlan {
            program,
            argv: pointers(&args),
            envp: pointers(&env),
            cwd: c_string(launch.cwd.as_os_str().as_bytes(), "the working directory")?,
            stdio: [
                stdin_r.as_raw_fd(),
                stdout_w.as_raw_fd(),
                stderr_w.as_raw_fd(),
            ],
            keep_fds: launch.keep_fds.to_vec(),
            steps: launch.steps.map(|s| s as *const ChildSteps),
            error_fd: error_w.as_raw_fd(),
            rlimits: launch.rlimits,
            cgroup_procs: launch.cgroup_procs.unwrap_or(-1),
            // SAFETY: getpid has no preconditions.
            parent: unsafe { libc::getpid() },
            exit_before_exec: launch.exit_before_exec,
            parent_pidfd: parent_pidfd.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            pinned: std::ptr::null(),
        },
        // The clone below resets the handlers itself; asking for each of
        // the 64 dispositions cost 64 system calls a command.
        vec![libc::SIGPIPE],
    );
    let stack = match SPARE_STACK.take() {
        Some(stack) => stack,
        None => Stack::new()?,
    };
    let pinned = Pinned::here();
    plan.0.pinned = &pinned;
    // Every signal stays blocked in this thread (and so in the child)
    // until the child has reset its handlers.
    // SAFETY: zeroed sigsets are valid values, filled in below.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain signal-mask calls on sets owned here.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // Started inside its leaf where the kernel can; else it joins the leaf
    // itself, which makes the kernel wait for an RCU grace period (5 to
    // 25 ms) whenever no other process joined a cgroup just before.
    let mut pid = -1;
    if let Some(dir) = launch.cgroup_dir {
        plan.0.cgroup_procs = -1;
        // SAFETY: as for `clone` below; the plan and stack outlive the
        // child's use of them (CLONE_VFORK).
        pid = unsafe {
            clone_into_cgroup(
                dir,
                namespaces,
                &stack,
                (&plan as *const (ChildPlan, Vec<libc::c_int>)) as *mut libc::c_void,
            )
        };
        plan.0.cgroup_procs = launch.cgroup_procs.unwrap_or(-1);
    }
    if pid < 0 {
        plan.1 = caught_signals();
        // SAFETY: the child runs `child_main` on its own stack with the
        // plan, both alive until clone returns (CLONE_VFORK: after exec or
        // exit).
        pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | namespaces | libc::SIGCHLD,
                (&plan as *const (ChildPlan, Vec<libc::c_int>)) as *mut libc::c_void,
            )
        };
    }
    let clone_error = std::io::Error::last_os_error();
    // SAFETY: restoring the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    // CLONE_VFORK: the child has exec'd or exited, and is done with it.
    SPARE_STACK.set(Some(stack));
    drop(pinned);
    if pid < 0 {
        return Err(CommandError::Spawn(format!(
            "{program_name}: {clone_error}"
        )));
    }
    drop((stdin_r, stdout_w, stderr_w, error_w));
    let mut errno = [0u8; 4];
    let mut error = File::from(error_r);
    if let Ok(4) = std::io::Read::read(&mut error, &mut errno) {
        let mut status = 0;
        // SAFETY: reaping the child that just failed before exec.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(CommandError::Spawn(format!(
            "{program_name}: {}",
            std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno))
        )));
    }
    Ok(Spawned {
        pid,
        stdin: Some(File::from(stdin_w)),
        stdout: Some(File::from(stdout_r)),
        stderr: Some(File::from(stderr_r)),
        status: None,
    })
}

/// This process as a pidfd (pidfd_open(2)): readable once it has exited.
fn own_pidfd() -> Result<OwnedFd, CommandError> {
    // SAFETY: pidfd_open of our own pid; the descriptor is ours alone.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if fd < 0 {
        return Err(CommandError::Spawn(format!(
            "pidfd_open: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: the kernel just returned this descriptor to us alone.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as RawFd) })
}

/// `struct clone_args` of clone3(2), up to `cgroup` (its second version).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// The child starts with every handler reset to the default (ignored
/// signals stay ignored), as exec would leave them (Linux 5.5, before
/// `CLONE_INTO_CGROUP`).
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Starts `child_main(plan)` on `stack`, sharing this process's memory
/// until it execs (as `clone` above), inside the cgroup whose directory
/// is `cgroup_dir`, with its signal handlers reset. Returns the pid, or -1
/// where the kernel cannot (older than 5.7, clone3 filtered, not a cgroup
/// v2 directory): nothing was started then, and the caller falls back to
/// `clone`.
///
/// # Safety
/// `plan` must point to a `(ChildPlan, Vec<c_int>)` that, with `stack`,
/// lives until this returns.
#[cfg(target_arch = "x86_64")]
unsafe fn clone_into_cgroup(
    cgroup_dir: RawFd,
    namespaces: libc::c_int,
    stack: &Stack,
    plan: *mut libc::c_void,
) -> libc::pid_t {
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | namespaces) as u64
            | CLONE_INTO_CGROUP
            | CLONE_CLEAR_SIGHAND,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: stack.len as u64,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup_dir as u64,
    };
    let entry: extern "C" fn(*mut libc::c_void) -> libc::c_int = child_main;
    let result: libc::c_long;
    // The child resumes after the syscall instruction with its stack
    // pointer at the top of `stack` and nothing else of this frame
    // usable, so its path is written here: call `child_main(plan)` (it
    // execs or exits; should it return, exit with what it returned). The
    // parent, suspended until then, takes the other branch with the pid.
    // SAFETY: the syscall reads `args`, which outlives it; the child runs
    // only on its own stack.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "mov edi, eax",
            "mov eax, {exit}",
            "syscall",
            "ud2",
            "2:",
            exit = const libc::SYS_exit,
            inlateout("rax") libc::SYS_clone3 => result,
            in("rdi") &args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") entry,
            in("r13") plan,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    if result < 0 {
        -1
    } else {
        result as libc::pid_t
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone_into_cgroup(
    _: RawFd,
    _: libc::c_int,
    _: &Stack,
    _: *mut libc::c_void,
) -> libc::pid_t {
    -1
}

impl Spawned {
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    fn reap(&mut self, flags: libc::c_int) -> std::io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let mut raw = 0;
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::waitpid(self.pid, &mut raw, flags) };
        match rc {
            0 => Ok(None),
            rc if rc < 0 => Err(std::io::Error::last_os_error()),
            _ => {
                self.status = Some(ExitStatus::from_raw(raw));
                Ok(self.status)
            }
        }
    }

    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.reap(libc::WNOHANG)
    }

    pub(crate) fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            match self.reap(0) {
                Ok(Some(status)) => return Ok(status),
                Ok(None) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs the calling thread may run on, as the kernel lists them.
    fn allowed_cpus(status: &str) -> String {
        std::fs::read_to_string(status)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn a_pinned_thread_runs_on_one_cpu_until_it_lets_go() {
        let before = allowed_cpus("/proc/thread-self/status");
        let pinned = Pinned::here();
        let during = allowed_cpus("/proc/thread-self/status");
        if pinned.saved.is_some() {
            assert!(
                during.parse::<usize>().is_ok(),
                "pinned to one CPU, not {during}"
            );
        } else {
            assert_eq!(during, before, "nothing to pin on a machine of one CPU");
        }
        drop(pinned);
        assert_eq!(allowed_cpus("/proc/thread-self/status"), before);
    }

    #[test]
    fn a_started_command_may_run_on_every_cpu_its_parent_could() {
        let before = allowed_cpus("/proc/thread-self/status");
        let seen = status_of_a_command(None);
        let seen = seen
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list:"))
            .unwrap()
            .trim_start_matches("Cpus_allowed_list:")
            .trim();
        assert_eq!(seen, before, "the command kept the CPU bl was pinned to");
        assert_eq!(allowed_cpus("/proc/thread-self/status"), before);
    }

    /// `/proc/self/status` as a command started by `spawn` sees it, started
    /// into the cgroup whose directory is `cgroup_dir`, if any.
    fn status_of_a_command(cgroup_dir: Option<RawFd>) -> String {
        let dir = std::env::temp_dir();
        let launch = Launch {
            program: Path::new("/bin/cat"),
            args: vec!["/proc/self/status".into()],
            env: Vec::new(),
            cwd: &dir,
            keep_fds: &[],
            steps: None,
            rlimits: false,
            cgroup_procs: None,
            cgroup_dir,
            exit_before_exec: false,
        };
        let mut child = spawn(&launch).unwrap();
        drop(child.stdin.take());
        let mut status = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut status).unwrap();
        assert!(child.wait().unwrap().success());
        status
    }

    /// The signals ignored by the process whose `status` this is (its
    /// `SigIgn` mask).
    fn ignored_signals(status: &str) -> u64 {
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .unwrap()
            .trim();
        u64::from_str_radix(mask, 16).unwrap()
    }

    #[test]
    fn a_started_command_gets_sigpipe_back_whichever_way_it_is_cloned() {
        let sigpipe = 1u64 << (libc::SIGPIPE - 1);
        let own = ignored_signals(&std::fs::read_to_string("/proc/self/status").unwrap());
        assert_ne!(
            own & sigpipe,
            0,
            "Rust ignores SIGPIPE in bl (and in this test)"
        );
        // A leaf where the machine has cgroups: the child is cloned into
        // it, its handlers reset by the kernel; else by the child itself.
        let contained = crate::containment::Contained::new();
        let leaf = contained.leaf_dir_fd().map(Some);
        for cgroup_dir in std::iter::once(None).chain(leaf) {
            let status = status_of_a_command(cgroup_dir);
            assert_eq!(
                ignored_signals(&status) & sigpipe,
                0,
                "the command (cgroup dir {cgroup_dir:?}) still ignores SIGPIPE"
            );
        }
    }
}
