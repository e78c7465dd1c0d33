//! One loop run as its own `bl run DIR` process (for `bl run DIR DIR…`):
//! no terminal to ask, its own process group so that a signal reaches it
//! once, from its parent, which passes on a stop; it ends with its parent.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use wait_timeout::ChildExt;

/// How often the parent looks up from a loop to see whether it was asked
/// to stop.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// What one loop's process left: its output, and how it ended (or why it
/// could not be started or waited for).
pub struct LoopProcess {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub status: std::io::Result<ExitStatus>,
}

/// Runs `exe run DIR FLAGS…` to its end.
pub fn run_loop_process(exe: &Path, dir: &Path, flags: &[OsString]) -> LoopProcess {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    let mut command = Command::new(exe);
    command
        .arg("run")
        .arg(dir)
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: prctl(2) and getppid(2) are async-signal-safe, and the
    // closure allocates nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)?;
            if std::os::unix::process::parent_id() != parent {
                // The parent ended between fork and prctl: nobody would hear this loop.
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return LoopProcess {
                stdout: Vec::new(),
                stderr: Vec::new(),
                status: Err(e),
            };
        }
    };
    let stdout = read_to_end(child.stdout.take());
    let stderr = read_to_end(child.stderr.take());
    let status = wait_passing_signals_on(&mut child);
    LoopProcess {
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        status,
    }
}

/// Reads a pipe to its end on a thread of its own, so that neither of a
/// child's pipes fills while the other is read.
fn read_to_end(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// Waits for a loop's process, passing it the signal this process was
/// asked to stop by (once): it ends its worker and gate and writes its
/// records.
fn wait_passing_signals_on(child: &mut std::process::Child) -> std::io::Result<ExitStatus> {
    let mut passed_on = false;
    loop {
        if !passed_on && let Some(signal) = bl_core::interrupt::requested() {
            // Not yet waited for, so the pid is still this child's.
            let pid = Pid::from_raw(child.id() as i32);
            let _ = kill(pid, Signal::try_from(signal).unwrap_or(Signal::SIGTERM));
            passed_on = true;
        }
        if let Some(status) = child.wait_timeout(SIGNAL_POLL)? {
            return Ok(status);
        }
    }
}
