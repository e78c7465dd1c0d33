//! The unconfined adapter: a plain child process with a scrubbed
//! environment. It confines nothing on the file system; it is what runs where
//! no sandbox tier was granted.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bl_core::{CommandError, CommandResult, CommandRunner, CommandSpec};

use crate::TailBuffer;
use crate::containment::Contained;

/// How long a finished command's output may keep arriving, from processes
/// that left its group, before its end stands without the rest.
const OUTPUT_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// Where a streamed command's output is copied as it comes.
type Tee = Box<dyn Write + Send>;

/// Reads `reader` to its end on its own thread into a shared tail (copying
/// each chunk to `tee`), and says so on `done`. The tail can be taken at
/// any time, so a reader blocked on a pipe someone else holds open never
/// holds up the command's end.
fn pump(
    mut reader: impl std::io::Read + Send + 'static,
    cap: usize,
    mut tee: Option<Tee>,
    done: std::sync::mpsc::Sender<()>,
) -> std::sync::Arc<std::sync::Mutex<TailBuffer>> {
    let tail = std::sync::Arc::new(std::sync::Mutex::new(TailBuffer::new(cap)));
    let shared = tail.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 16 << 10];
        loop {
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    if let Some(tee) = tee.as_mut() {
                        // A closed tee is ignored: the tail is what matters.
                        let _ = tee.write_all(&chunk[..n]).and_then(|_| tee.flush());
                    }
                    shared
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .push(&chunk[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done.send(());
    });
    tail
}

/// How often a running command's supervisor looks for an interruption.
const INTERRUPT_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// How long the operator's stop lets a running command end by itself
/// before it is killed: an agent CLI that has printed its reply may take a
/// moment to exit, and a turn that ends within it is kept, not paid for
/// again. A second signal ends everything at once.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// The only PATH a command sees: the system's binaries, nothing the
/// operator's shell added.
pub const SCRUBBED_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

#[derive(Debug, Default, Clone)]
pub struct Subprocess;

impl CommandRunner for Subprocess {
    fn name(&self) -> &str {
        "subprocess"
    }

    fn run(&self, spec: &CommandSpec) -> Result<CommandResult, CommandError> {
        let Some((program, args)) = spec.argv.split_first() else {
            return Err(CommandError::Denied("the argv is empty".into()));
        };
        if !spec.workspace.is_dir() {
            return Err(CommandError::Denied(format!(
                "workspace {} is not a directory",
                spec.workspace.display()
            )));
        }
        // Declared first, dropped last: after the private dirs.
        let _running = bl_core::interrupt::Running::start();
        let private = PrivateDirs::for_spec(spec)?;
        let mut contained = Contained::new();
        let mut granted = spec.env.clone();
        granted.extend(
            contained
                .marker()
                .map(|(k, v)| (k, v.to_string_lossy().into_owned())),
        );
        let result = if !cfg!(target_os = "linux") {
            let mut command = Command::new(program);
            command.args(args).current_dir(&spec.workspace);
            scrub_env(&mut command, &private.home, &private.tmp, &granted);
            contain_child(&mut command, contained.procs_fd());
            execute(command, spec, &mut contained)
        } else {
            spawn_polled(spec, &private, granted, &mut contained)
        };
        // Whatever the command left running ends with it.
        contained.end();
        result
    }
}

/// Starts a command without copying bl's address space (see
/// [`crate::spawn`]), then streams or supervises it.
#[cfg(target_os = "linux")]
fn spawn_polled(
    spec: &CommandSpec,
    private: &PrivateDirs,
    granted: Vec<(String, String)>,
    contained: &mut Contained,
) -> Result<CommandResult, CommandError> {
    let program_name = spec.argv[0].clone();
    let program = find_program(&program_name, &spec.workspace, &granted)?;
    let started = Instant::now();
    let launch = crate::spawn::Launch {
        program: &program,
        args: spec.argv[1..].to_vec(),
        env: scrubbed_env(&private.home, &private.tmp, &granted),
        cwd: &spec.workspace,
        keep_fds: &[],
        steps: None,
        rlimits: false,
        cgroup_procs: contained.procs_fd(),
        cgroup_dir: contained.leaf_dir_fd(),
        exit_before_exec: false,
    };
    run_launched(&launch, spec, &program_name, started, contained)
}

/// Starts `launch` as the contained command (see [`crate::spawn`]), then
/// streams or supervises it; `program` names it in what is reported.
#[cfg(target_os = "linux")]
pub(crate) fn run_launched(
    launch: &crate::spawn::Launch,
    spec: &CommandSpec,
    program: &str,
    started: Instant,
    contained: &mut Contained,
) -> Result<CommandResult, CommandError> {
    let child = contained.spawn(|| {
        crate::spawn::spawn(launch).map(|c| {
            let pid = c.pid();
            (c, pid)
        })
    })?;
    crate::spare_net::after_start();
    if spec.stream {
        stream(child, spec, started, contained)
    } else {
        supervise(child, spec, program, started, contained)
    }
}

#[cfg(not(target_os = "linux"))]
fn spawn_polled(
    _: &CommandSpec,
    _: &PrivateDirs,
    _: Vec<(String, String)>,
    _: &mut Contained,
) -> Result<CommandResult, CommandError> {
    unreachable!("only Linux starts commands through crate::spawn")
}

/// Where the command's `argv[0]` is: a path (relative to the workspace),
/// or a name on the PATH the command is given (`env`'s last PATH, else the
/// scrubbed one), as execvp would find it.
pub(crate) fn find_program(
    program: &str,
    workspace: &Path,
    env: &[(String, String)],
) -> Result<PathBuf, CommandError> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = workspace.join(program);
        return if executable(&path) {
            Ok(path)
        } else {
            Err(CommandError::Spawn(format!(
                "No such file or directory: '{program}'"
            )))
        };
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or(SCRUBBED_PATH, |(_, v)| v.as_str());
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
        .ok_or_else(|| {
            CommandError::Spawn(format!(
                "No such file or directory: '{program}' (not on PATH {path})"
            ))
        })
}

/// Joins the command's cgroup leaf (before exec, in the child): writing
/// `0` moves the writer. Async-signal-safe.
pub(crate) fn join_cgroup(procs: Option<i32>) -> std::io::Result<()> {
    if let Some(fd) = procs {
        // SAFETY: a write of one byte from a static buffer.
        if unsafe { nix::libc::write(fd, c"0".as_ptr().cast(), 1) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The command dies with bl (SIGKILL when bl's thread that started it
/// ends), and does not start at all if bl already died. Async-signal-safe.
pub(crate) fn die_with_parent(parent: i32) -> std::io::Result<()> {
    use nix::libc;
    // SAFETY: prctl with integer arguments; getppid has no preconditions.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// The same, for a child the standard library forks.
fn contain_child(command: &mut Command, procs: Option<i32>) {
    let parent = std::process::id() as i32;
    // SAFETY: both steps are async-signal-safe system calls.
    unsafe {
        command.pre_exec(move || {
            join_cgroup(procs)?;
            die_with_parent(parent)
        });
    }
}

/// A private HOME and TMPDIR for one command: the caller's
/// [`CommandSpec::private_dir`], or a temporary one removed afterwards.
pub(crate) struct PrivateDirs {
    _made: Option<tempfile::TempDir>,
    root: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
}

impl PrivateDirs {
    pub(crate) fn for_spec(spec: &CommandSpec) -> Result<Self, CommandError> {
        match &spec.private_dir {
            Some(dir) if dir.is_dir() => Ok(PrivateDirs {
                _made: None,
                root: dir.clone(),
                home: dir.clone(),
                tmp: dir.clone(),
            }),
            Some(dir) => Err(CommandError::Denied(format!(
                "private directory {} is not a directory",
                dir.display()
            ))),
            None => Self::new(),
        }
    }

    /// A private HOME and TMPDIR that exist only inside a cage: `root` is
    /// the empty directory its private tmpfs is mounted on.
    pub(crate) fn mount_point(root: &Path) -> Self {
        PrivateDirs {
            _made: None,
            root: root.to_path_buf(),
            home: root.join("home"),
            tmp: root.join("tmp"),
        }
    }

    pub(crate) fn new() -> Result<Self, CommandError> {
        let root = crate::containment::owned_tempdir("bl-cmd-")
            .map_err(|e| CommandError::Spawn(format!("cannot make a private HOME: {e}")))?;
        let home = root.path().join("home");
        let tmp = root.path().join("tmp");
        for dir in [&home, &tmp] {
            std::fs::create_dir(dir)
                .map_err(|e| CommandError::Spawn(format!("{}: {e}", dir.display())))?;
        }
        Ok(PrivateDirs {
            root: root.path().to_path_buf(),
            _made: Some(root),
            home,
            tmp,
        })
    }

    /// The directory holding both.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }
}

/// Clears the environment down to PATH, HOME, TMPDIR and LANG, then sets
/// what the caller granted (which may name the operator's own PATH or HOME:
/// an agent CLI logs in with the operator's session).
pub(crate) fn scrub_env(
    command: &mut Command,
    home: &Path,
    tmp: &Path,
    granted: &[(String, String)],
) {
    command.env_clear().envs(scrubbed_env(home, tmp, granted));
}

/// The whole environment [`scrub_env`] leaves, a later grant of a name
/// replacing an earlier value.
pub(crate) fn scrubbed_env(
    home: &Path,
    tmp: &Path,
    granted: &[(String, String)],
) -> Vec<(String, std::ffi::OsString)> {
    let mut env: std::collections::BTreeMap<String, std::ffi::OsString> = [
        ("PATH", SCRUBBED_PATH.into()),
        ("HOME", home.as_os_str().to_owned()),
        ("TMPDIR", tmp.as_os_str().to_owned()),
        ("LANG", "C.UTF-8".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.extend(granted.iter().map(|(k, v)| (k.clone(), v.into())));
    env.into_iter().collect()
}

/// Spawns `command` in its own process group with piped stdio, feeds stdin,
/// keeps the output tails, and kills the whole group at the timeout.
pub(crate) fn execute(
    command: Command,
    spec: &CommandSpec,
    contained: &mut Contained,
) -> Result<CommandResult, CommandError> {
    if spec.stream {
        execute_streamed(command, spec, contained)
    } else {
        execute_polled(command, spec, contained)
    }
}

/// What a command left: its exit code (none when the timeout ended it) and
/// its output tails.
fn result_of(
    out: TailBuffer,
    err: TailBuffer,
    status: Option<std::process::ExitStatus>,
    timed_out: bool,
    started: Instant,
) -> CommandResult {
    CommandResult {
        exit_code: if timed_out {
            None
        } else {
            status.and_then(|s| s.code())
        },
        truncated: out.truncated() || err.truncated(),
        stdout_tail: out.into_bytes(),
        stderr_tail: err.into_bytes(),
        timed_out,
        duration: started.elapsed(),
    }
}

/// Spawns `command` with piped stdio in its own process group, so the
/// timeout kills its grandchildren too.
fn spawn_in_group(
    command: &mut Command,
    program: &str,
) -> Result<std::process::Child, CommandError> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| CommandError::Spawn(format!("{program}: {e}")))
}

/// Makes a pipe end non-blocking, for the poll loop.
fn set_nonblocking(fd: &impl std::os::fd::AsFd) -> Result<(), CommandError> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(fd, FcntlArg::F_GETFL)
        .map_err(|e| CommandError::Spawn(format!("pipe flags: {e}")))?;
    fcntl(
        fd,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(|e| CommandError::Spawn(format!("pipe flags: {e}")))?;
    Ok(())
}

/// Reads what `pipe` has now into `tail`; `false` once it is closed.
fn drain(pipe: &mut impl std::io::Read, tail: &mut TailBuffer, chunk: &mut [u8]) -> bool {
    loop {
        match pipe.read(chunk) {
            Ok(0) => return false,
            Ok(n) => tail.push(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

/// [`execute`] for a command whose output is kept, not streamed: one
/// thread polls the three pipes, so a command costs no reader or feeder
/// threads (a graph of thousands of nodes runs thousands of commands).
fn execute_polled(
    mut command: Command,
    spec: &CommandSpec,
    contained: &mut Contained,
) -> Result<CommandResult, CommandError> {
    let program = spec.argv.first().cloned().unwrap_or_default();
    let started = Instant::now();
    let child = contained.spawn(|| {
        spawn_in_group(&mut command, &program).map(|c| {
            let pid = c.id() as i32;
            (c, pid)
        })
    })?;
    supervise(child, spec, &program, started, contained)
}

/// A started child with piped stdio, in its own process group: the
/// standard library's, or one started by [`crate::spawn`].
pub(crate) trait Running {
    /// Its stdin, stdout and stderr, taken once.
    fn pipes(&mut self) -> [Option<std::fs::File>; 3];
    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>>;
    fn wait(&mut self) -> std::io::Result<std::process::ExitStatus>;
}

impl Running for std::process::Child {
    fn pipes(&mut self) -> [Option<std::fs::File>; 3] {
        use std::os::fd::OwnedFd;
        [
            self.stdin.take().map(|p| OwnedFd::from(p).into()),
            self.stdout.take().map(|p| OwnedFd::from(p).into()),
            self.stderr.take().map(|p| OwnedFd::from(p).into()),
        ]
    }

    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        std::process::Child::try_wait(self)
    }

    fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        std::process::Child::wait(self)
    }
}

#[cfg(target_os = "linux")]
impl Running for crate::spawn::Spawned {
    fn pipes(&mut self) -> [Option<std::fs::File>; 3] {
        [self.stdin.take(), self.stdout.take(), self.stderr.take()]
    }

    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        crate::spawn::Spawned::try_wait(self)
    }

    fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        crate::spawn::Spawned::wait(self)
    }
}

/// Feeds a started child its stdin, keeps its output tails, and kills its
/// whole group at the timeout, on this one thread.
pub(crate) fn supervise(
    mut child: impl Running,
    spec: &CommandSpec,
    program: &str,
    started: Instant,
    contained: &Contained,
) -> Result<CommandResult, CommandError> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let [stdin, mut stdout, mut stderr] = child.pipes();
    let mut stdin = stdin.filter(|_| !spec.stdin.is_empty());
    for fd in [
        stdin.as_ref().map(|p| p.as_fd()),
        stdout.as_ref().map(|p| p.as_fd()),
        stderr.as_ref().map(|p| p.as_fd()),
    ]
    .into_iter()
    .flatten()
    {
        if let Err(e) = set_nonblocking(&fd) {
            contained.kill_rest();
            let _ = child.wait();
            return Err(e);
        }
    }
    let (mut out, mut err) = (
        TailBuffer::new(spec.output_cap),
        TailBuffer::new(spec.output_cap),
    );
    let mut chunk = vec![0u8; 16 << 10];
    let mut written = 0;
    let mut exited = None;
    let mut grace_until: Option<Instant> = None;
    let mut timed_out = false;
    let mut interrupted = None;
    let mut stop_by: Option<Instant> = None;
    while stdout.is_some() || stderr.is_some() {
        let now = Instant::now();
        if grace_until.is_some_and(|until| now >= until) {
            // The command ended; whoever left its group keeps the pipes.
            break;
        }
        if exited.is_none() {
            if now.duration_since(started) >= spec.timeout {
                contained.kill_rest();
                // A stop that came first stands: the command was stopped,
                // not timed out.
                match stop_by.and(bl_core::interrupt::requested()) {
                    Some(signal) => interrupted = Some(signal),
                    None => timed_out = true,
                }
                break;
            }
            // A stop gives the command STOP_GRACE to end by itself, its
            // output still read meanwhile: one that ends (an agent that had
            // printed its reply and was exiting) is read to its end below,
            // and its finished turn is kept, never paid for again.
            if let Some(signal) = bl_core::interrupt::requested() {
                let deadline = *stop_by.get_or_insert(now + STOP_GRACE);
                if now >= deadline
                    && let Some(signal) = contained.cut_short_by(Some(signal), Duration::ZERO)
                {
                    contained.kill_rest();
                    interrupted = Some(signal);
                    break;
                }
            }
        }
        // Until its end is seen, a stop's grace bounds the wait too.
        let stop_left = stop_by
            .filter(|_| exited.is_none())
            .map_or(INTERRUPT_POLL, |by| by.saturating_duration_since(now));
        let left = spec
            .timeout
            .saturating_sub(now.duration_since(started))
            .min(stop_left);
        let wait = left.min(INTERRUPT_POLL).as_millis().max(1) as u16;
        let (out_ready, err_ready, in_ready) = {
            let mut fds = Vec::with_capacity(3);
            let mut slots = [None; 3];
            if let Some(p) = &stdout {
                slots[0] = Some(fds.len());
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
            if let Some(p) = &stderr {
                slots[1] = Some(fds.len());
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
            if let Some(p) = &stdin {
                slots[2] = Some(fds.len());
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLOUT));
            }
            match poll(&mut fds, PollTimeout::from(wait)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    contained.kill_rest();
                    let _ = child.wait();
                    return Err(CommandError::Spawn(format!("polling {program}: {e}")));
                }
            }
            let ready = |slot: Option<usize>| {
                slot.is_some_and(|i| fds[i].revents().is_some_and(|r| !r.is_empty()))
            };
            (ready(slots[0]), ready(slots[1]), ready(slots[2]))
        };
        if out_ready
            && !stdout
                .as_mut()
                .is_some_and(|p| drain(p, &mut out, &mut chunk))
        {
            stdout = None;
        }
        if err_ready
            && !stderr
                .as_mut()
                .is_some_and(|p| drain(p, &mut err, &mut chunk))
        {
            stderr = None;
        }
        if in_ready && let Some(pipe) = stdin.as_mut() {
            match pipe.write(&spec.stdin[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // A command that exits without reading its stdin is not an error.
                Err(_) => written = spec.stdin.len(),
            }
            if written >= spec.stdin.len() {
                stdin = None;
            }
        }
        // Its end is seen before it is reaped: what it left is ended while
        // its group's number is still its own.
        if exited.is_none() && contained.exited(std::time::Duration::ZERO) {
            contained.kill_rest();
            exited = child.try_wait().ok().flatten();
            grace_until = Some(Instant::now() + OUTPUT_GRACE);
        }
    }
    drop(stdin);
    let status = match exited {
        Some(status) => Some(status),
        None if timed_out || interrupted.is_some() => child.wait().ok(),
        None => {
            // The pipes closed first: the command is ending; wait for it
            // within what is left of its time (or of a stop's grace), then
            // end what it left.
            let left = spec.timeout.saturating_sub(started.elapsed());
            match bl_core::interrupt::requested() {
                Some(signal) => {
                    let grace = stop_by.map_or(STOP_GRACE, |by| {
                        by.saturating_duration_since(Instant::now())
                    });
                    interrupted = contained.cut_short_by(Some(signal), grace.min(left));
                }
                None if !contained.exited(left) => timed_out = true,
                None => {}
            }
            contained.kill_rest();
            child.wait().ok()
        }
    };
    if let Some(signal) = interrupted {
        return Err(CommandError::Interrupted(signal));
    }
    Ok(result_of(out, err, status, timed_out, started))
}

/// [`execute`] for a streamed command: reader threads copy its output to
/// the caller's terminal as it comes, and its stdin is the caller's.
fn execute_streamed(
    mut command: Command,
    spec: &CommandSpec,
    contained: &mut Contained,
) -> Result<CommandResult, CommandError> {
    let program = spec.argv.first().cloned().unwrap_or_default();
    let started = Instant::now();
    let child = contained.spawn(|| {
        spawn_in_group(&mut command, &program).map(|c| {
            let pid = c.id() as i32;
            (c, pid)
        })
    })?;
    stream(child, spec, started, contained)
}

/// Streams a started child: reader threads copy its output to the
/// caller's terminal as it comes, and its stdin is the caller's.
fn stream(
    mut child: impl Running,
    spec: &CommandSpec,
    started: Instant,
    contained: &mut Contained,
) -> Result<CommandResult, CommandError> {
    let [stdin, stdout, stderr] = child.pipes();
    let input = spec.stdin.clone();
    let stream = spec.stream;
    let feeder = std::thread::spawn(move || {
        let Some(mut stdin) = stdin else { return };
        // A command that exits without reading its stdin is not an error.
        if stream {
            // Through a pipe, not inherited: the command runs in its own
            // process group, which may not read the terminal.
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut stdin);
        } else {
            let _ = stdin.write_all(&input);
        }
    });
    let cap = spec.output_cap;
    let stdout = stdout.expect("stdout is piped");
    let stderr = stderr.expect("stderr is piped");
    let (drained, readers_done) = std::sync::mpsc::channel();
    let out_tail = pump(
        stdout,
        cap,
        stream.then(|| Box::new(std::io::stdout()) as Tee),
        drained.clone(),
    );
    let err_tail = pump(
        stderr,
        cap,
        stream.then(|| Box::new(std::io::stderr()) as Tee),
        drained,
    );

    let mut interrupted = None;
    let (status, timed_out) = loop {
        // Short waits, so an interruption is noticed within one of them;
        // its end is seen before it is reaped, and what it left (holding
        // the pipes open) ended while its group's number is its own.
        let left = spec.timeout.saturating_sub(started.elapsed());
        if contained.exited(left.min(INTERRUPT_POLL)) {
            contained.kill_rest();
            break (child.wait().ok(), false);
        }
        if left <= INTERRUPT_POLL {
            contained.kill_rest();
            break (child.wait().ok(), true);
        }
        if let Some(requested) = bl_core::interrupt::requested() {
            // Its output is read on threads of their own: the command may
            // end by itself within the grace, a whole run.
            interrupted = contained.cut_short_by(Some(requested), STOP_GRACE.min(left));
            contained.kill_rest();
            break (child.wait().ok(), false);
        }
    };
    // The pipes close when the last writer is gone. A process that left
    // the group (setsid) may keep them open for as long as it likes: the
    // rest of the output gets a short grace, then the command's end stands
    // and the readers and the feeder are left to end with that process.
    let grace = Instant::now() + OUTPUT_GRACE;
    for _ in 0..2 {
        if readers_done
            .recv_timeout(grace.saturating_duration_since(Instant::now()))
            .is_err()
        {
            break;
        }
    }
    drop(feeder);
    let take = |tail: &std::sync::Arc<std::sync::Mutex<TailBuffer>>| {
        let mut tail = tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::replace(&mut *tail, TailBuffer::new(0))
    };
    let (out, err) = (take(&out_tail), take(&err_tail));
    if let Some(signal) = interrupted {
        return Err(CommandError::Interrupted(signal));
    }
    Ok(result_of(out, err, status, timed_out, started))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spec(argv: &[&str], workspace: &std::path::Path) -> CommandSpec {
        CommandSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            workspace: workspace.to_path_buf(),
            workspace_writable: true,
            stdin: Vec::new(),
            timeout: Duration::from_secs(10),
            output_cap: 1024,
            stream: false,
            env: Vec::new(),
            private_dir: None,
            home: None,
        }
    }

    /// A command is recorded in every spawn log recording when it starts
    /// (two runs driven side by side in one process each keep it), and in
    /// none once its recording ended.
    #[test]
    fn a_command_goes_to_every_spawn_log_recording_when_it_starts() {
        use crate::containment::record_spawns;
        let ws = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let (first, second) = (logs.path().join("first"), logs.path().join("second"));
        let its_pid = || -> i64 {
            let ran = Subprocess
                .run(&spec(&["sh", "-c", "echo $$"], ws.path()))
                .unwrap();
            String::from_utf8(ran.stdout_tail)
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        // Other tests start commands meanwhile: a log may hold theirs too.
        let recorded = |log: &std::path::Path| -> Vec<i64> {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["pid"]
                        .as_i64()
                        .unwrap()
                })
                .collect()
        };
        let recording_first = record_spawns(first.clone());
        let alone = its_pid();
        let recording_second = record_spawns(second.clone());
        let beside = its_pid();
        drop(recording_second);
        let after_second = its_pid();
        drop(recording_first);
        let after_both = its_pid();
        let (first, second) = (recorded(&first), recorded(&second));
        for pid in [alone, beside, after_second] {
            assert!(first.contains(&pid), "{pid} not in the first log {first:?}");
        }
        assert!(
            second.contains(&beside),
            "{beside} not in the second log {second:?}"
        );
        for pid in [alone, after_second, after_both] {
            assert!(!second.contains(&pid), "{pid} in the second log {second:?}");
        }
        assert!(
            !first.contains(&after_both),
            "{after_both} in the first log {first:?}"
        );
    }

    #[test]
    fn a_command_after_one_that_left_a_process_behind_runs() {
        // The first command's cgroup leaf is killed (it left `sleep`
        // running) and must never be used again: a child started straight
        // into a cgroup once killed is killed at birth on Linux 6.14 and
        // later. An empty leaf never killed serves the next command.
        let ws = tempfile::tempdir().unwrap();
        for _ in 0..3 {
            let left = Subprocess
                .run(&spec(&["sh", "-c", "sleep 30 & exit 0"], ws.path()))
                .unwrap();
            assert_eq!(left.exit_code, Some(0));
            for _ in 0..2 {
                let next = Subprocess
                    .run(&spec(&["sh", "-c", "exit 7"], ws.path()))
                    .unwrap();
                assert_eq!(next.exit_code, Some(7), "{next:?}");
            }
        }
    }

    #[test]
    fn runs_in_the_workspace_with_a_scrubbed_environment() {
        let ws = tempfile::tempdir().unwrap();
        // SAFETY: tests in this module do not read the environment concurrently.
        unsafe { std::env::set_var("BL_TEST_SECRET", "leak") };
        let result = Subprocess
            .run(&spec(
                &["sh", "-c", "pwd; env | sort; echo oops >&2; exit 7"],
                ws.path(),
            ))
            .unwrap();
        let stdout = String::from_utf8(result.stdout_tail).unwrap();
        assert_eq!(result.exit_code, Some(7));
        assert!(stdout.starts_with(&ws.path().canonicalize().unwrap().display().to_string()));
        assert!(!stdout.contains("BL_TEST_SECRET"), "{stdout}");
        assert!(stdout.contains(&format!("PATH={SCRUBBED_PATH}")));
        assert!(stdout.contains("HOME=/") && stdout.contains("/bl-cmd-"));
        assert_eq!(result.stderr_tail, b"oops\n");
    }

    #[test]
    fn a_timeout_kills_the_whole_process_group() {
        let ws = tempfile::tempdir().unwrap();
        let mut s = spec(&["sh", "-c", "sleep 30 & sleep 30"], ws.path());
        s.timeout = Duration::from_millis(200);
        let result = Subprocess.run(&s).unwrap();
        assert!(result.timed_out);
        assert_eq!(result.exit_code, None);
        // The grandchild held stdout open; returning at all proves it died.
        assert!(result.duration < Duration::from_secs(5));
    }

    #[test]
    fn output_is_capped_to_its_tail() {
        let ws = tempfile::tempdir().unwrap();
        let result = Subprocess
            .run(&spec(&["sh", "-c", "seq 1 100000"], ws.path()))
            .unwrap();
        assert!(result.truncated);
        assert_eq!(result.stdout_tail.len(), 1024);
        assert!(result.stdout_tail.ends_with(b"99999\n100000\n"));
    }

    #[test]
    fn stdin_reaches_the_command_and_a_missing_program_is_a_spawn_error() {
        let ws = tempfile::tempdir().unwrap();
        let mut s = spec(&["cat"], ws.path());
        s.stdin = b"hello".to_vec();
        assert_eq!(Subprocess.run(&s).unwrap().stdout_tail, b"hello");
        let err = Subprocess
            .run(&spec(&["/nonexistent/program"], ws.path()))
            .unwrap_err();
        assert!(matches!(err, CommandError::Spawn(_)), "{err:?}");
        assert!(matches!(
            Subprocess.run(&spec(&[], ws.path())),
            Err(CommandError::Denied(_))
        ));
    }
}
